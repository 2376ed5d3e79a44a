//! The query path on arbitrary bytes: parse, decide, answer from the cluster zone, encode.
//! Whatever comes in, nothing panics and every reply is a well-formed DNS response.

#![no_main]

use std::sync::{Arc, OnceLock};

use hickory_proto::op::{Message, MessageType};
use libfuzzer_sys::fuzz_target;
use prometheus_client::registry::Registry;
use tideway_core::cluster::{ClusterState, Snapshot};
use tideway_core::model::ServiceType;
use tideway_core::net::Protocol::{Tcp, Udp};
use tideway_core::testing::{mk_service, mk_slice};
use tideway_dns::forward::cache::{Cache, CacheSettings};
use tideway_dns::forward::{ForwardSettings, Forwarder};
use tideway_dns::handler::wire::{Handled, handle_bytes};
use tideway_dns::handler::{Core, Options};
use tideway_dns::metrics::{Metrics, Proto};
use tideway_dns::records::{IndexSettings, PodsMode, RecordIndex};

fn core() -> &'static Core {
    static CORE: OnceLock<Core> = OnceLock::new();
    CORE.get_or_init(|| {
        let mut ext = mk_service("ns1", "ext").build();
        ext.service_type = ServiceType::ExternalName;
        ext.external_name = Some("web.ns1.svc.cluster.local".into());
        let snapshot = Snapshot {
            services: vec![
                mk_service("ns1", "web")
                    .cluster_ip("10.96.0.10")
                    .cluster_ip("fd00:96::10")
                    .port("http", Tcp, 80)
                    .build(),
                mk_service("ns1", "hl").headless().port("dns", Udp, 53).build(),
                ext,
            ],
            endpoint_slices: vec![
                mk_slice("ns1", "hl")
                    .port("dns", Udp, 53)
                    .ready("10.244.1.5", "a")
                    .hostname("h0")
                    .ready("10.244.2.5", "b")
                    .build(),
                mk_slice("ns1", "hl").name("hl-v6").port("dns", Udp, 53).ready("fd00:244::5", "a").build(),
            ],
            ..Default::default()
        };
        let mut settings = IndexSettings::new("cluster.local").unwrap();
        settings.pods = PodsMode::Insecure;
        let metrics = Arc::new(Metrics::new("127.0.0.1:53".parse().unwrap(), &mut Registry::default()));
        Core::new(
            RecordIndex::build(&ClusterState::from_snapshot(snapshot), &settings, 1),
            Forwarder::new(ForwardSettings::default(), Arc::clone(&metrics)),
            Cache::new(CacheSettings::default(), Arc::clone(&metrics)),
            Options::default(),
            metrics,
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let src = "192.0.2.1:5353".parse().unwrap();
    for proto in [Proto::Udp, Proto::Tcp] {
        if let Handled::Respond(bytes) = handle_bytes(core(), data, src, proto) {
            let reply = Message::from_vec(&bytes).expect("replies parse");
            assert_eq!(reply.metadata.message_type, MessageType::Response);
            if proto == Proto::Udp {
                assert!(bytes.len() <= 1232, "UDP replies fit the advertised size");
            }
        }
    }
});
