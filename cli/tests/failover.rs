//! Failover with whole components: `tideway operator` and two `tideway agent`s (dataplane,
//! announcer, gossip), each a process in its own network namespace, against the real API server
//! (root; needs `make kube`) as their chart ServiceAccounts, each namespace reaching the server
//! through a relay on its loopback. The Nodes stay Ready and never change, as kubelet keeps
//! them when only an agent dies. Killing the announcing agent must move the address: the other
//! node's agent answers ARP for it and a client on the segment is served through that node.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::process::Child;
use std::time::Instant;

use serde_json::Value;
use support::real_api::{Api, battery, get, relays};
use support::*;
use tideway_tests::netns::{Cluster, Netns, eventually, tcp};

/// The client's address on the segment: the operator runs there, as a control-plane host
/// beside the nodes.
const CONTROL: &str = "192.168.0.100";
/// The pool, on the nodes' segment and clear of the addresses the battery routes.
const POOL: &str = "192.168.0.220-192.168.0.229";

/// The battery's objects (Nodes Ready), a pool and LoadBalancer Service `lb` with a pod on
/// each node.
fn objects() -> Vec<Value> {
    let mut extra = format!(
        "---\napiVersion: tideway.io/v1alpha1\nkind: LoadBalancerPool\nmetadata: {{name: default}}\nspec: {{addresses: [{POOL}]}}\n"
    );
    extra += "---\napiVersion: v1\nkind: Service\nmetadata: {name: lb, namespace: demo}\nspec: {type: LoadBalancer, clusterIP: 10.96.0.30, ports: [{name: p, port: 80, nodePort: 30090}]}\n";
    extra += "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: lb-1, namespace: demo, labels: {kubernetes.io/service-name: lb}}\naddressType: IPv4\nports: [{name: p, port: 8080, protocol: TCP}]\nendpoints:\n- {addresses: [10.244.1.11], nodeName: node-a, conditions: {ready: true}}\n- {addresses: [10.244.2.11], nodeName: node-b, conditions: {ready: true}}\n";
    // This test's `lb` and its slice replace the battery's; its other LoadBalancers go.
    let all = battery(&extra);
    let key =
        |o: &Value| (o["kind"].clone(), o["metadata"]["namespace"].clone(), o["metadata"]["name"].clone());
    let mut kept: Vec<Value> = Vec::new();
    for object in all.into_iter().rev() {
        let other_lb = object["spec"]["type"] == "LoadBalancer" && object["metadata"]["name"] != "lb";
        if !other_lb && !kept.iter().any(|k| key(k) == key(&object)) {
            kept.push(object);
        }
    }
    kept.reverse();
    kept
}

/// The node named by `lb`'s L2Announcement.
async fn announcer(admin: &kube::Client) -> Option<String> {
    let ann = get(admin, "/apis/tideway.io/v1alpha1/namespaces/demo/l2announcements/lb").await?;
    ann["spec"]["node"].as_str().map(str::to_string)
}

/// The Service's LoadBalancer address, once assigned.
async fn lb_address(admin: &kube::Client) -> Option<IpAddr> {
    let svc = get(admin, "/api/v1/namespaces/demo/services/lb").await?;
    svc["status"]["loadBalancer"]["ingress"][0]["ip"].as_str()?.parse().ok()
}

/// What kubelet keeps of each Node while only an agent dies.
async fn nodes(admin: &kube::Client) -> Vec<Value> {
    let mut out = Vec::new();
    for node in ["node-a", "node-b"] {
        out.push(tideway_lab::kube::rest::kubelet_view(admin, node).await.expect("the Node"));
    }
    out
}

/// Polls `f` every 100 ms until it gives `Some`, for at most `within`; what it last said.
async fn poll<T, F, Fut>(within: std::time::Duration, mut f: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(v) = f().await {
            return Ok(v);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(format!("nothing after {within:?}"))
}

fn mac_of(ns: &Netns) -> String {
    ns.sh("cat /sys/class/net/eth0/address").trim().to_string()
}

/// The client's neighbour entry for `ip` (its MAC, if it has one).
fn neighbour(client: &Netns, ip: IpAddr) -> Option<String> {
    let line = client.sh(&format!("ip neigh show {ip}"));
    line.split_whitespace().skip_while(|w| *w != "lladdr").nth(1).map(str::to_string)
}

/// Served through the node whose eth0 has `mac`: the connection succeeds while the client's
/// neighbour entry points at that MAC, before and after.
fn served_through(client: &Netns, lb: SocketAddr, mac: &str) -> Result<String, String> {
    let before = neighbour(client, lb.ip());
    let answer = tcp(client, lb)?;
    let after = neighbour(client, lb.ip());
    match (before, after) {
        (Some(b), Some(a)) if b == mac && a == mac => Ok(answer.name),
        other => Err(format!("neighbour entry {other:?}, want {mac}")),
    }
}

fn spawn(ns: &Netns, c: &Cluster, args: &[&str], log: &str) -> Child {
    let scale = patience(1.0).as_secs_f64().to_string();
    ns.spawn(&c.bin, args, &c.dir.join(log), &[("TIDEWAY_GOSSIP_TIME_SCALE", scale.as_str())])
}

/// Killed on drop, so a failing test leaves no process behind.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_announcing_agent_moves_the_address_while_its_node_stays_ready() {
    tideway_tests::netns::require_root("the agents");
    let mut api = Api::start("kfail", &[]).await;
    api.applier.apply_all(objects()).await.unwrap();
    let admin = api.admin.clone();
    let nodes_before = nodes(&admin).await;
    let c = cluster("kube-failover");
    let namespaces: Vec<&Netns> = std::iter::once(&c.client).chain(c.nodes.iter().map(|n| &n.ns)).collect();
    let (port, _relays) = relays(&namespaces, api.standalone.cp.host_endpoint());
    let operator_kc =
        api.kubeconfig_via("tideway-system", "tideway-operator", port).await.display().to_string();
    // Every member seals its gossip with the same key.
    let key = c.dir.join("gossip-key");
    std::fs::write(&key, "the-failover-test-key-0123456789abcdef\n").unwrap();
    let key = key.display().to_string();
    let operator = spawn(
        &c.client,
        &c,
        &[
            "operator",
            "--source",
            "kubernetes",
            "--kubeconfig",
            &operator_kc,
            "--gossip-advertise-address",
            CONTROL,
            "--gossip-key-file",
            &key,
        ],
        "operator.log",
    );
    let mut procs = Procs(vec![operator]);
    let agent_kc = api.kubeconfig_via("tideway-system", "tideway-agent", port).await.display().to_string();
    for node in &c.nodes {
        let args = ["agent", "--node", &node.name, "--source", "kubernetes", "--kubeconfig", &agent_kc];
        let mut args = args.to_vec();
        args.extend(["--min-sync-period", "100ms", "--sync-period", "2s", "--gossip-key-file", &key]);
        procs.0.push(spawn(&node.ns, &c, &args, &format!("agent-{}.log", node.name)));
    }
    let logs = || {
        ["operator.log", "agent-node-a.log", "agent-node-b.log"]
            .map(|l| format!("--- {l}\n{}", tail(&c.log(l), 40)))
            .join("\n")
    };

    let ip = poll(patience(20.0), || lb_address(&admin))
        .await
        .unwrap_or_else(|e| panic!("no address: {e}\n{}", logs()));
    let lb = SocketAddr::new(ip, 80);
    let first = poll(patience(20.0), || announcer(&admin))
        .await
        .unwrap_or_else(|e| panic!("no announcer: {e}\n{}", logs()));
    let index = |name: &str| c.nodes.iter().position(|n| n.name == name).expect("a node of the test");
    let (old, new) = (index(&first), 1 - index(&first));
    let (old_mac, new_mac) = (mac_of(&c.nodes[old].ns), mac_of(&c.nodes[new].ns));
    // The client reaches the address through the announcer (ARP answered by its agent).
    eventually(patience(20.0), || {
        let _ = tcp(&c.client, lb);
        served_through(&c.client, lb, &old_mac)
    })
    .unwrap_or_else(|e| panic!("not served through {first}: {e}\n{}", logs()));
    // Both agents alive: nothing moves.
    std::thread::sleep(patience(2.0));
    assert_eq!(announcer(&admin).await.as_deref(), Some(first.as_str()), "moved while both agents live");

    // The announcing agent dies (SIGKILL: no goodbye); its Node stays Ready, its rules stay.
    let killed = Instant::now();
    let agent = &mut procs.0[1 + old];
    agent.kill().expect("kill the agent");
    agent.wait().expect("reap the agent");
    let second = poll(patience(10.0), || async { announcer(&admin).await.filter(|n| *n != first) })
        .await
        .unwrap_or_else(|e| panic!("still on the dead agent's node: {e}\n{}", logs()));
    assert_eq!(second, c.nodes[new].name);
    // The client, which only keeps trying, is served through the new node: its agent's
    // gratuitous ARP updated the client's neighbour entry.
    let served = eventually(patience(10.0), || served_through(&c.client, lb, &new_mac))
        .unwrap_or_else(|e| panic!("not served through {second}: {e}\n{}", logs()));
    assert!(["a1", "b1"].contains(&served.as_str()), "answered by {served}, not one of lb's endpoints");
    let took = killed.elapsed();
    assert!(took < patience(10.0), "agent killed to served through {second}: {took:?}");
    assert_eq!(nodes_before, nodes(&admin).await, "the Nodes never changed");
    drop(procs);
    api.record_usage();
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
