//! Positive answers: every record kind, dual-stack, headless, endpoint names, SRV, readiness.

use hickory_proto::rr::RecordType;

use super::*;
use crate::records::PodsMode;

use RecordType::{A, AAAA, NS, SOA, SRV, TXT};

#[test]
fn services_endpoints_and_srv() {
    run(
        &index_with_pods(PodsMode::Disabled),
        &[
            // ClusterIP A/AAAA, also with no endpoints.
            ok("svc1.testns.svc.cluster.local.", A, &["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"], &[]),
            ok(
                "svcempty.testns.svc.cluster.local.",
                A,
                &["svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.2"],
                &[],
            ),
            ok(
                "svc6.testns.svc.cluster.local.",
                AAAA,
                &["svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"],
                &[],
            ),
            // SRV on the bare name and on _port._proto, glue in the additional section.
            ok(
                "svc1.testns.svc.cluster.local.",
                SRV,
                &["svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."],
                &["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"],
            ),
            ok(
                "svc6.testns.svc.cluster.local.",
                SRV,
                &["svc6.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc6.testns.svc.cluster.local."],
                &["svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"],
            ),
            ok(
                "_http._tcp.svc1.testns.svc.cluster.local.",
                SRV,
                &[
                    "_http._tcp.svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local.",
                ],
                &["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"],
            ),
            ok(
                "_http._tcp.svcempty.testns.svc.cluster.local.",
                SRV,
                &[
                    "_http._tcp.svcempty.testns.svc.cluster.local. 5 IN SRV 0 100 80 svcempty.testns.svc.cluster.local.",
                ],
                &["svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.2"],
            ),
            ok(
                "multiport.testns.svc.cluster.local.",
                SRV,
                &[
                    "multiport.testns.svc.cluster.local. 5 IN SRV 0 50 53 multiport.testns.svc.cluster.local.",
                    "multiport.testns.svc.cluster.local. 5 IN SRV 0 50 80 multiport.testns.svc.cluster.local.",
                ],
                &["multiport.testns.svc.cluster.local. 5 IN A 10.0.0.4"],
            ),
            ok(
                "_dns._udp.multiport.testns.svc.cluster.local.",
                SRV,
                &[
                    "_dns._udp.multiport.testns.svc.cluster.local. 5 IN SRV 0 100 53 multiport.testns.svc.cluster.local.",
                ],
                &["multiport.testns.svc.cluster.local. 5 IN A 10.0.0.4"],
            ),
            nxdomain("_dns._tcp.multiport.testns.svc.cluster.local.", SRV),
            nxdomain("_nope._tcp.svc1.testns.svc.cluster.local.", SRV),
            // Dual stack: A and AAAA separately; SRV one row (weight over both IPs), A+AAAA glue.
            ok(
                "svc-dual-stack.testns.svc.cluster.local.",
                A,
                &["svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3"],
                &[],
            ),
            ok(
                "svc-dual-stack.testns.svc.cluster.local.",
                AAAA,
                &["svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3"],
                &[],
            ),
            ok(
                "svc-dual-stack.testns.svc.cluster.local.",
                SRV,
                &[
                    "svc-dual-stack.testns.svc.cluster.local. 5 IN SRV 0 50 80 svc-dual-stack.testns.svc.cluster.local.",
                ],
                &[
                    "svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3",
                    "svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3",
                ],
            ),
            // Headless: every ready endpoint of the family.
            ok(
                "hdls1.testns.svc.cluster.local.",
                A,
                &[
                    "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2",
                    "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
                    "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
                    "hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
                ],
                &[],
            ),
            ok(
                "hdls1.testns.svc.cluster.local.",
                AAAA,
                &[
                    "hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1",
                    "hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2",
                ],
                &[],
            ),
            ok(
                "hdlsprtls.testns.svc.cluster.local.",
                A,
                &["hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"],
                &[],
            ),
            // Endpoint names: dashed IPv4/IPv6, explicit and duplicated hostnames, under
            // headless and ClusterIP Services; no ports needed.
            ok(
                "172-0-0-20.hdlsprtls.testns.svc.cluster.local.",
                A,
                &["172-0-0-20.hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"],
                &[],
            ),
            ok(
                "172-0-0-2.hdls1.testns.svc.cluster.local.",
                A,
                &["172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2"],
                &[],
            ),
            ok(
                "dup-name.hdls1.testns.svc.cluster.local.",
                A,
                &[
                    "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
                    "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
                ],
                &[],
            ),
            ok(
                "5678-abcd--2.hdls1.testns.svc.cluster.local.",
                AAAA,
                &["5678-abcd--2.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2"],
                &[],
            ),
            nodata("5678-abcd--2.hdls1.testns.svc.cluster.local.", A),
            ok(
                "ep1a.svc1.testns.svc.cluster.local.",
                A,
                &["ep1a.svc1.testns.svc.cluster.local. 5 IN A 172.0.0.1"],
                &[],
            ),
            // Pod hostname + subdomain: the StatefulSet name.
            ok(
                "web-0.sts.testns.svc.cluster.local.",
                A,
                &["web-0.sts.testns.svc.cluster.local. 5 IN A 172.0.1.1"],
                &[],
            ),
            // Headless SRV: targets are endpoint names; weight over all 6 candidate rows.
            ok(
                "_http._tcp.hdls1.testns.svc.cluster.local.",
                SRV,
                &[
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 172-0-0-2.hdls1.testns.svc.cluster.local.",
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 172-0-0-3.hdls1.testns.svc.cluster.local.",
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 5678-abcd--1.hdls1.testns.svc.cluster.local.",
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 5678-abcd--2.hdls1.testns.svc.cluster.local.",
                    "_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 dup-name.hdls1.testns.svc.cluster.local.",
                ],
                &[
                    "172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2",
                    "172-0-0-3.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
                    "5678-abcd--1.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1",
                    "5678-abcd--2.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2",
                    "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4",
                    "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5",
                ],
            ),
            ok(
                "_web._tcp.sts.testns.svc.cluster.local.",
                SRV,
                &[
                    "_web._tcp.sts.testns.svc.cluster.local. 5 IN SRV 0 100 8080 web-0.sts.testns.svc.cluster.local.",
                ],
                &["web-0.sts.testns.svc.cluster.local. 5 IN A 172.0.1.1"],
            ),
            // A headless Service without ports has no SRV rows.
            nodata("hdlsprtls.testns.svc.cluster.local.", SRV),
            // dns-version, apex and ns.dns.
            ok("dns-version.cluster.local.", TXT, &["dns-version.cluster.local. 28800 IN TXT 1.1.0"], &[]),
            ok("cluster.local.", SOA, &[SOA_LINE], &[]),
            ok(
                "cluster.local.",
                NS,
                &["cluster.local. 5 IN NS ns.dns.cluster.local."],
                &["ns.dns.cluster.local. 5 IN A 10.0.0.10"],
            ),
            ok("ns.dns.cluster.local.", A, &["ns.dns.cluster.local. 5 IN A 10.0.0.10"], &[]),
        ],
    );
}

#[test]
fn readiness_semantics() {
    run(
        &index_with_pods(PodsMode::Disabled),
        &[
            // Not ready (including terminating) endpoints are not published; a headless
            // Service with no ready endpoint does not exist.
            nxdomain("hdls-notready.testns.svc.cluster.local.", A),
            nxdomain("172-0-0-30.hdls-notready.testns.svc.cluster.local.", A),
            nxdomain("_http._tcp.hdls-notready.testns.svc.cluster.local.", SRV),
            // publishNotReadyAddresses publishes them anyway.
            ok(
                "hdls-pnra.testns.svc.cluster.local.",
                A,
                &["hdls-pnra.testns.svc.cluster.local. 5 IN A 172.0.0.40"],
                &[],
            ),
        ],
    );
}
