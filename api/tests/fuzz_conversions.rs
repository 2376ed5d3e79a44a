//! Every object conversion and the REST bodies (a ProxyConfig PATCH, a packet to trace) fed
//! mutated objects: seeds from the test fixtures, the examples and the API's own writers, each
//! mutated a few times at random places (values replaced by hostile ones, fields removed or
//! added, types changed; a body is also sent cut short). No input may panic a conversion, and
//! every refusal names a field.
//!
//! Bounded: `FUZZ_INPUTS` inputs per kind (default 2000) or `FUZZ_SECONDS` seconds per kind
//! (default 1), whichever comes first; `FUZZ_SEED` picks another sequence. The test prints (to stderr) how
//! many inputs each kind was given (`cargo nextest run --no-capture`).

use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tideway_api::ConvertError;
use tideway_api::crd::{
    self, IPAddressPool, L2Advertisement, L2Announcement, LoadBalancerPool, NodeProxyState, ProxyConfig,
    ServiceL2Status,
};
use tideway_serve::problem::Problem;

mod support;

/// xorshift64*: a fixed sequence per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Values that have broken parsers before, or may.
fn hostile(rng: &mut Rng) -> Value {
    let strings = [
        "",
        "0",
        "-1",
        "9999999999999999999999h",
        "2562048h",
        "1e400",
        "0s",
        "25h",
        ".",
        "::",
        ":::",
        "10.0.0.0/33",
        "10.0.0.1-10.0.0.0",
        "10.0.0.1-fd00::1",
        "fd00::/129",
        "256.1.1.1",
        "1.2.3.4/-1",
        "µs",
        "1µs",
        "ipvs",
        "In",
        "Within",
        "TCP",
        "ICMP",
        "LoadBalancer",
        "Local",
        "2023-11-14T22:13:20Z",
        "9999-99-99T99:99:99Z",
        "ns/name",
        "/",
        "a/b/c",
        "\u{0}",
        "é",
        "🦀",
    ];
    match rng.below(12) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(i64::MAX),
        3 => json!(i64::MIN),
        4 => json!(u64::MAX),
        5 => json!(rng.next() as i64 % 70000),
        6 => json!(1e300),
        7 => json!(-0.5),
        8 => json!([]),
        9 => json!({}),
        10 => json!("x".repeat(rng.below(400))),
        _ => json!(strings[rng.below(strings.len())]),
    }
}

/// Every place in `v`: object members and array elements, as paths of keys and indexes.
fn places(v: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                at.push(json!(k));
                out.push(at.clone());
                places(child, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(json!(i));
                out.push(at.clone());
                places(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn parent<'a>(root: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    let mut node = root;
    for step in &path[..path.len().saturating_sub(1)] {
        node = match step {
            Value::String(k) => node.get_mut(k.as_str())?,
            Value::Number(i) => node.get_mut(usize::try_from(i.as_u64()?).ok()?)?,
            _ => return None,
        };
    }
    Some(node)
}

/// One random change of `v`.
fn mutate(v: &mut Value, rng: &mut Rng) {
    let mut all = Vec::new();
    places(v, &mut Vec::new(), &mut all);
    if all.is_empty() {
        return;
    }
    let path = all.swap_remove(rng.below(all.len()));
    let (Some(node), Some(last)) = (parent(v, &path), path.last()) else { return };
    let choice = rng.below(5);
    match (node, last) {
        (Value::Object(m), Value::String(k)) => match choice {
            0 => {
                m.remove(k);
            }
            1 => {
                m.insert(format!("{k}X"), hostile(rng));
            }
            2 => {
                if let Some(Value::String(s)) = m.get_mut(k) {
                    let cut = (0..=s.len()).filter(|i| s.is_char_boundary(*i)).nth(rng.below(s.len() + 1));
                    s.truncate(cut.unwrap_or(0));
                } else {
                    m.insert(k.clone(), hostile(rng));
                }
            }
            _ => {
                m.insert(k.clone(), hostile(rng));
            }
        },
        (Value::Array(a), Value::Number(i)) => {
            let i = usize::try_from(i.as_u64().unwrap_or(0)).unwrap_or(0).min(a.len().saturating_sub(1));
            match choice {
                0 if !a.is_empty() => {
                    a.remove(i);
                }
                1 if !a.is_empty() => {
                    let copy = a[i].clone();
                    a.push(copy);
                }
                _ if !a.is_empty() => a[i] = hostile(rng),
                _ => a.push(hostile(rng)),
            }
        }
        _ => {}
    }
}

/// Seeds of every kind: the fixtures', the examples' and `accepted.yaml`'s objects.
fn seeds() -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<_> = std::fs::read_dir(root.join("tests/fixtures"))
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .collect();
    files.extend(
        ["examples/cluster.yaml", "examples/demo.yaml", "api/tests/accepted.yaml"].map(|f| root.join(f)),
    );
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_default();
        out.extend(docs.into_iter().filter(|d| d.is_object()));
    }
    out.extend(written_seeds());
    out
}

/// A Namespace, MetalLB's two kinds, and a NodeProxyState and an L2Announcement as the
/// components write them.
fn written_seeds() -> Vec<Value> {
    use tideway_core::model;
    let state = model::NodeProxyState {
        node: "node-a".into(),
        ready: true,
        service_ports: 3,
        last_sync: Some(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        last_sync_duration: Some(Duration::from_millis(12)),
        announcing: vec!["172.18.255.200".parse().expect("ip")],
        missing_interfaces: vec!["vlan100".into()],
        programmed_version: Some(41),
        ..Default::default()
    };
    let announcement = model::L2Announcement {
        service: model::ServiceName::new("demo", "web"),
        ips: vec!["172.18.255.200".parse().expect("ip"), "fc00::1".parse().expect("ip")],
        node: Some("node-a".into()),
        eligible: vec!["node-a".into(), "node-b".into()],
        interfaces: vec!["eth0".into()],
    };
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo", "labels": {"team": "a"}}}),
        // MetalLB's own objects (read under --metallb-compat, converted by `tideway migrate`).
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": {"name": "gold", "namespace": "metallb-system", "labels": {"tier": "gold"}},
            "spec": {"addresses": ["192.168.10.0/24", "192.168.9.1-192.168.9.5", "fc00::/124"],
                "autoAssign": false, "avoidBuggyIPs": true,
                "serviceAllocation": {"priority": 5, "namespaces": ["shop"],
                    "namespaceSelectors": [{"matchLabels": {"team": "a"}}],
                    "serviceSelectors": [{"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}]}}}),
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
            "metadata": {"name": "by-label", "namespace": "metallb-system"},
            "spec": {"ipAddressPools": ["gold"], "ipAddressPoolSelectors": [{"matchLabels": {"tier": "gold"}}],
                "nodeSelectors": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}],
                "interfaces": ["eth0"]}}),
        json!({"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
            "metadata": {"name": "l2-c54z5", "namespace": "metallb-system"}, "spec": {},
            "status": {"node": "node-a", "serviceName": "web", "serviceNamespace": "demo",
                "interfaces": [{"name": "eth0"}]}}),
        serde_json::to_value(crd::node_proxy_state(&state, Some("uid-1"))).expect("json"),
        serde_json::to_value(crd::l2_announcement_object(&announcement, Some("uid-2"))).expect("json"),
    ]
}

/// Inputs tried, decoded (so converted), and refused by the conversion.
#[derive(Debug, Default, Clone, Copy)]
#[allow(dead_code)] // Read through Debug.
struct Tally {
    tried: usize,
    converted: usize,
    refused: usize,
}

/// Runs `convert` over mutations of the seeds of kind `K`.
fn fuzz<K: DeserializeOwned + Debug, M>(
    kind: &str,
    seeds: &[Value],
    rng: &mut Rng,
    convert: impl Fn(&K) -> Result<M, ConvertError>,
) -> Tally {
    let seeds: Vec<&Value> = seeds.iter().filter(|s| s["kind"] == kind).collect();
    assert!(!seeds.is_empty(), "no seed of kind {kind}");
    let (max, until) =
        (env("FUZZ_INPUTS", 2000usize), Instant::now() + Duration::from_secs(env("FUZZ_SECONDS", 1)));
    let mut t = Tally::default();
    while t.tried < max && Instant::now() < until {
        let mut input = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            mutate(&mut input, rng);
        }
        t.tried += 1;
        // A value the type does not decode never reaches a conversion (the watch reports it).
        let Ok(obj) = serde_json::from_value::<K>(input.clone()) else { continue };
        t.converted += 1;
        match catch_unwind(AssertUnwindSafe(|| convert(&obj))) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                t.refused += 1;
                assert!(
                    !e.field.is_empty() && !e.message.is_empty(),
                    "{kind}: a refusal without a field: {e:?}"
                );
                assert_eq!(e.kind, kind, "{e}");
            }
            Err(_) => panic!("{kind}: the conversion panicked on {input}"),
        }
    }
    t
}

/// The REST PATCH of a ProxyConfig: mutated patches against the seeds' configs.
fn fuzz_patch(seeds: &[Value], rng: &mut Rng) -> Tally {
    let configs: Vec<_> = seeds
        .iter()
        .filter(|s| s["kind"] == "ProxyConfig")
        .filter_map(|s| serde_json::from_value::<ProxyConfig>(s.clone()).ok())
        .filter_map(|pc| crd::proxy_config(&pc).ok())
        .collect();
    let patches: Vec<Value> = seeds
        .iter()
        .filter(|s| s["kind"] == "ProxyConfig")
        .map(|s| json!({"spec": s["spec"].clone()}))
        .collect();
    let (max, until) =
        (env("FUZZ_INPUTS", 2000usize), Instant::now() + Duration::from_secs(env("FUZZ_SECONDS", 1)));
    let mut t = Tally::default();
    while t.tried < max && Instant::now() < until {
        let current = &configs[rng.below(configs.len())];
        let mut patch = patches[rng.below(patches.len())].clone();
        for _ in 0..=rng.below(4) {
            mutate(&mut patch, rng);
        }
        t.tried += 1;
        t.converted += 1;
        match catch_unwind(AssertUnwindSafe(|| crd::patch_proxy_config(current, &patch))) {
            Ok(Ok(change)) => {
                // What the check passes, the nodes can run.
                let obj = ProxyConfig::new(&current.name, change.spec);
                assert!(crd::proxy_config(&obj).is_ok(), "{patch}");
            }
            Ok(Err(e)) => {
                t.refused += 1;
                assert!(!e.field.is_empty() && !e.message.is_empty(), "{patch}: {e:?}");
            }
            Err(_) => panic!("PATCH panicked on {patch}"),
        }
    }
    t
}

/// Bodies of the agents' `POST /api/v1/trace`, as the CLI and the docs send them.
fn trace_seeds() -> Vec<Value> {
    vec![
        json!({"src": "10.244.1.5", "dst": "10.96.0.10", "port": 53, "protocol": "udp"}),
        json!({"src": "10.244.1.5", "dst": "10.96.0.1", "port": 443, "srcPort": 40000, "protocol": "tcp", "from": "pod"}),
        json!({"src": "203.0.113.7", "dst": "172.18.255.200", "port": 80, "from": "external"}),
        json!({"src": "fd00:10:244::5", "dst": "fd00:10:96::a", "port": 8080, "protocol": "sctp", "from": "node"}),
    ]
}

/// A REST body as bytes: mutated seeds, serialized, and one in eight cut short. Every body is
/// decoded and checked by `check`: no panic, and every refusal a 400 naming a field.
fn fuzz_body<T>(
    seeds: &[Value],
    rng: &mut Rng,
    check: impl Fn(Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>) -> Result<T, Problem>,
) -> Tally {
    let (max, until) =
        (env("FUZZ_INPUTS", 2000usize), Instant::now() + Duration::from_secs(env("FUZZ_SECONDS", 1)));
    let mut t = Tally::default();
    while t.tried < max && Instant::now() < until {
        let mut input = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            mutate(&mut input, rng);
        }
        let mut text = input.to_string();
        if rng.below(8) == 0 {
            let cut = (0..=text.len()).filter(|i| text.is_char_boundary(*i)).nth(rng.below(text.len() + 1));
            text.truncate(cut.unwrap_or(0));
        }
        t.tried += 1;
        t.converted += 1;
        let body = Ok(axum::body::Bytes::from(text.clone()));
        match catch_unwind(AssertUnwindSafe(|| check(body))) {
            Ok(Ok(_)) => {}
            Ok(Err(p)) => {
                t.refused += 1;
                assert_eq!(p.status, 400, "{text}: {p:?}");
                assert!(
                    p.errors.iter().any(|e| !e.field.is_empty() && !e.message.is_empty()),
                    "{text}: a refusal without a field: {p:?}"
                );
            }
            Err(_) => panic!("the body check panicked on {text}"),
        }
    }
    t
}

#[test]
fn mutated_objects_never_panic_a_conversion_and_every_refusal_names_a_field() {
    let seeds = seeds();
    let mut rng = Rng(env("FUZZ_SEED", 0x7469_6465_7761_7921u64) | 1);
    let r = &mut rng;
    let counts = [
        ("Service", fuzz::<Service, _>("Service", &seeds, r, tideway_api::convert::service)),
        (
            "EndpointSlice",
            fuzz::<EndpointSlice, _>("EndpointSlice", &seeds, r, tideway_api::convert::endpoint_slice),
        ),
        ("Node", fuzz::<Node, _>("Node", &seeds, r, tideway_api::convert::node)),
        ("Pod", fuzz::<Pod, _>("Pod", &seeds, r, tideway_api::convert::pod)),
        ("Namespace", fuzz::<Namespace, _>("Namespace", &seeds, r, tideway_api::convert::namespace)),
        ("ProxyConfig", fuzz::<ProxyConfig, _>("ProxyConfig", &seeds, r, crd::proxy_config)),
        ("NodeProxyState", fuzz::<NodeProxyState, _>("NodeProxyState", &seeds, r, crd::node_state_from)),
        (
            "LoadBalancerPool",
            fuzz::<LoadBalancerPool, _>("LoadBalancerPool", &seeds, r, crd::load_balancer_pool),
        ),
        ("L2Announcement", fuzz::<L2Announcement, _>("L2Announcement", &seeds, r, crd::l2_announcement)),
        ("IPAddressPool", fuzz::<IPAddressPool, _>("IPAddressPool", &seeds, r, crd::ip_address_pool)),
        ("L2Advertisement", fuzz::<L2Advertisement, _>("L2Advertisement", &seeds, r, crd::l2_advertisement)),
        ("ServiceL2Status", fuzz::<ServiceL2Status, _>("ServiceL2Status", &seeds, r, crd::service_l2_status)),
        ("PATCH ProxyConfig", fuzz_patch(&seeds, r)),
        ("POST trace", fuzz_body(&trace_seeds(), r, tideway_serve::bodies::trace_packet)),
    ];
    let total: usize = counts.iter().map(|(_, t)| t.tried).sum();
    eprintln!("conversion fuzz: {total} inputs");
    for (kind, t) in counts {
        eprintln!("  {kind}: {t:?}");
        assert!(t.tried >= 100, "{kind}: only {t:?} in the time given");
        assert!(
            t.converted > t.tried / 10 && t.refused > 0,
            "{kind}: the mutations miss the conversion: {t:?}"
        );
    }
}

/// The conversion of a ProxyConfig or pool object: Ok when it converts.
fn converts(object: &Value) -> Option<Result<(), ConvertError>> {
    Some(match object["kind"].as_str()? {
        "ProxyConfig" => crd::proxy_config(&serde_json::from_value(object.clone()).ok()?).map(drop),
        "LoadBalancerPool" => {
            crd::load_balancer_pool(&serde_json::from_value(object.clone()).ok()?).map(drop)
        }
        _ => return None,
    })
}

#[test]
fn what_the_generated_schema_admits_converts() {
    // One definition: an object the API server admits (OpenAPI keywords, then CEL rules) is one
    // every component can run.
    let seeds: Vec<Value> = seeds()
        .into_iter()
        .filter(|s| s["kind"] == "ProxyConfig" || s["kind"] == "LoadBalancerPool")
        .collect();
    let mut rng = Rng(env("FUZZ_SEED", 0x7469_6465_7761_7921u64) | 1);
    let (max, until) =
        (env("FUZZ_INPUTS", 2000usize), Instant::now() + Duration::from_secs(env("FUZZ_SECONDS", 1)));
    let (mut tried, mut admitted, mut refused) = (0, 0, 0);
    // At least a fifth of the inputs however slow the machine, so the shares below hold.
    let min = max / 5;
    while tried < max && (tried < min || Instant::now() < until) {
        let mut input = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(3) {
            mutate(&mut input, &mut rng);
        }
        tried += 1;
        // The API server requires a name; the schema does not say so.
        if input["metadata"]["name"].as_str().is_none_or(str::is_empty) || !input["spec"].is_object() {
            continue;
        }
        let Some(converted) = converts(&input) else { continue };
        let Ok(failures) = catch_unwind(AssertUnwindSafe(|| support::admission_failures(&input))) else {
            continue;
        };
        // The gap no schema keyword or standard CEL function closes, left to the conversion: a
        // pool range whose first address is after its last (no address comparison).
        let gap = matches!(&converted, Err(e) if e.message.contains("starts after it ends"));
        if failures.is_empty() && !gap {
            admitted += 1;
            assert!(converted.is_ok(), "admitted but refused by the conversion: {input}: {converted:?}");
        } else {
            refused += 1;
        }
    }
    eprintln!("schema against conversion: {tried} inputs, {admitted} admitted, {refused} refused");
    // Both sides are exercised: about a quarter of the inputs is admitted, one in twenty refused.
    assert!(
        admitted * 10 > tried && refused * 50 > tried,
        "{admitted} admitted, {refused} refused of {tried}"
    );
}
