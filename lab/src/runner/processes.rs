//! The processes the running lab wants: one agent per node (with `--bgp` when the lab has a
//! router, and its node-local DNS listener), the pods' servers, the DNS pod, the operator, and FRR's daemons; each runs inside
//! its namespace through `ip netns exec`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::lab::Lab;
use super::pods::server_ports;

impl Lab {
    pub(super) fn exec_in(&self, ns: &str, args: &[&str]) -> Vec<String> {
        let mut v = vec!["ip".to_string(), "netns".into(), "exec".into(), ns.to_string()];
        v.push(self.bin.display().to_string());
        v.extend(args.iter().map(|a| a.to_string()));
        v
    }

    /// The argv that runs `tideway ARGS` in network namespace `ns` and nothing else of it: the
    /// host's mount namespace stays, so the namespaces the process makes (`ip netns add`, as the
    /// lab's kubelet does for its pods) are the host's too. `ip netns exec` would give it a mount
    /// namespace of its own, where they could not be entered from outside.
    pub(super) fn exec_in_net(&self, ns: &str, args: &[&str]) -> Vec<String> {
        let mut v = vec!["nsenter".to_string(), format!("--net=/run/netns/{ns}"), "--".into()];
        v.push(self.bin.display().to_string());
        v.extend(args.iter().map(|a| a.to_string()));
        v
    }

    pub(super) fn log(&self, label: &str) -> PathBuf {
        self.dir.path().join("logs").join(format!("{}.log", label.replace('/', "_")))
    }

    /// Every process the world needs: label -> command line.
    pub(super) fn wanted_processes(&self) -> BTreeMap<String, Vec<String>> {
        if self.kube_mode {
            // Tideway's components are the chart's Pods, which the kubelets run.
            let mut wanted = if self.kube.is_some() { self.wanted_kubelets() } else { BTreeMap::new() };
            self.want_frr(&mut wanted);
            return wanted;
        }
        let source = format!("lab:{}", self.dir.path().display());
        let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let token = crate::token::path(self.dir.path()).display().to_string();
        let gossip_key = crate::token::gossip_key_path(self.dir.path()).display().to_string();
        let tls = |name: &str| {
            let c = crate::certs::issued(self.dir.path(), name);
            [c.cert.display().to_string(), c.key.display().to_string()]
        };
        let (agent_tls, dns_tls, operator_tls) = (tls("agent"), tls("dns"), tls("operator"));
        for n in &self.world.nodes {
            let ns = self.names.node(&n.name);
            let mut args = vec![
                "agent",
                "--node",
                &n.name,
                "--source",
                &source,
                "--healthz-bind-address",
                "0.0.0.0:10256",
                "--metrics-bind-address",
                "0.0.0.0:10249",
                "--api-token-file",
                &token,
                "--gossip-key-file",
                &gossip_key,
                "--tls-cert",
                &agent_tls[0],
                "--tls-key",
                &agent_tls[1],
                // Cluster DNS answered on each node: pods' queries to the kube-dns ClusterIP
                // reach their node's agent while it runs, the DNS pod otherwise.
                "--node-local-dns",
            ];
            let frr_dir = self.agent_frr_dir(&n.name);
            if !self.world.routers.is_empty() {
                args.extend(["--bgp", "--frr-pathspace", &ns, "--frr-dir", &frr_dir]);
            }
            wanted.insert(format!("agent/{}", n.name), self.exec_in(&ns, &args));
        }
        self.want_frr(&mut wanted);
        for p in &self.world.pods {
            let ns = self.names.pod(&p.namespace, &p.name);
            if p.is_dns() {
                let upstream = format!("{}:53", self.plan.gateway);
                let args = [
                    "dns",
                    "--source",
                    &source,
                    "--listen",
                    "0.0.0.0:53",
                    "--upstream",
                    &upstream,
                    "--no-loop-probe",
                    "--workers",
                    "1",
                    "--pods",
                    "insecure",
                    "--lameduck",
                    "0s",
                    "--health-listen",
                    "0.0.0.0:8080",
                    "--ready-listen",
                    "0.0.0.0:8181",
                    "--metrics-listen",
                    "0.0.0.0:9153",
                    "--tls-cert",
                    &dns_tls[0],
                    "--tls-key",
                    &dns_tls[1],
                ];
                wanted.insert(format!("pod/{}/{}/dns", p.namespace, p.name), self.exec_in(&ns, &args));
                continue;
            }
            for port in server_ports(p) {
                let listen = format!("0.0.0.0:{port}");
                let ready = self.started_file(p, port).display().to_string();
                let args = ["whoami", "--name", &p.name, "--listen", &listen, "--ready-file", &ready];
                wanted.insert(format!("pod/{}/{}/{port}", p.namespace, p.name), self.exec_in(&ns, &args));
            }
        }
        // The operator runs in a namespace of its own too, so `lab down` finds it after a crash.
        let advertise = self.plan.operator_ip.to_string();
        let args = [
            "operator",
            "--source",
            &source,
            "--http-bind-address",
            "127.0.0.1:8080",
            "--api-token-file",
            &token,
            "--tls-cert",
            &operator_tls[0],
            "--tls-key",
            &operator_tls[1],
            "--gossip-advertise-address",
            &advertise,
            "--gossip-key-file",
            &gossip_key,
        ];
        wanted.insert("operator".into(), self.exec_in(&self.names.operator(), &args));
        wanted
    }
}
