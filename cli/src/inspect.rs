//! `tideway status`, `tideway explain` and `tideway mode`: a running system read and changed
//! over its REST APIs (a lab's, found through the lab, or an operator's at a URL), shown as
//! kubectl-style tables. The rendering is pure: JSON answers in, text out.

use std::fmt::Write;
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tideway_lab::tour::table;

use tideway_telemetry::client::ServerCheck;

use crate::api_client::ApiClient;

/// Which running system to ask.
#[derive(Debug, Clone, Args)]
pub(crate) struct Target {
    /// The operator's API, `https://HOST:PORT` or `http://...` (default: the lab's, see --lab).
    #[arg(long)]
    operator: Option<String>,
    /// The running lab to ask (its operator and agents).
    #[arg(long, default_value = "demo")]
    lab: String,
    /// Bearer token for the APIs (a lab's own token is used by default).
    #[arg(long, env = "TIDEWAY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    tls: ServerCheck,
}

impl Target {
    /// The operator's API: the URL given, else the running lab's.
    pub(crate) fn operator(&self) -> Result<ApiClient> {
        match &self.operator {
            Some(url) => Ok(ApiClient::new(url, self.token.clone(), &self.tls)?),
            None => lab_api(&self.lab, "operator", self.token.clone(), &self.tls)
                .context("or name an operator with --operator URL"),
        }
    }
}

/// API `label` (`operator`, `agent/NODE`, `dns`) of the running lab `lab`, with the lab's
/// token unless `token` is given, over HTTPS verified with the lab's CA unless `tls` names one.
fn lab_api(lab: &str, label: &str, token: Option<String>, tls: &ServerCheck) -> Result<ApiClient> {
    let status = tideway_lab::cli::status_json(lab).with_context(|| format!("asking lab {lab}"))?;
    let addr = status["apis"][label].as_str().with_context(|| format!("lab {lab} has no API {label:?}"))?;
    let token = token.or_else(|| status["apiToken"].as_str().map(str::to_string));
    let lab_ca = status["caFile"].as_str().map(PathBuf::from);
    let tls = ServerCheck { ca_file: tls.ca_file.clone().or(lab_ca), ..tls.clone() };
    let url = tideway_lab::certs::url(label, addr, "");
    Ok(ApiClient::new(&url, token, &tls)?)
}

/// The agent API of `node` in lab `lab`, with the lab's token unless `token` is given.
pub(crate) fn lab_agent(
    lab: &str,
    node: &str,
    token: Option<String>,
    tls: &ServerCheck,
) -> Result<ApiClient> {
    lab_api(lab, &format!("agent/{node}"), token, tls)
}

/// `tideway status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// Print the API's JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// `tideway explain`.
#[derive(Debug, Args)]
pub(crate) struct ExplainArgs {
    #[command(subcommand)]
    what: Explain,
}

#[derive(Debug, Subcommand)]
enum Explain {
    /// A Service: addresses, ports, endpoints per node, who may receive its external traffic,
    /// who announces it, which nodes programmed it, its DNS names.
    Service {
        /// `NAMESPACE/NAME` (or `NAME` in `default`).
        name: String,
        /// Print the API's JSON instead.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
}

/// `tideway mode`.
#[derive(Debug, Args)]
pub(crate) struct ModeArgs {
    /// `nftables`, `iptables` or `ipvs`.
    mode: String,
    /// The ProxyConfig to change.
    #[arg(long, default_value = "default")]
    config: String,
    #[command(flatten)]
    target: Target,
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// `3s`, `4m`, `2h`, `5d` since an RFC 3339 time, or `-`.
fn age(since: &Value, now: SystemTime) -> String {
    let Some(t) = since.as_str().and_then(|t| t.parse::<Timestamp>().ok()) else { return "-".into() };
    let Ok(now) = Timestamp::try_from(now) else { return "-".into() };
    let secs = now.duration_since(t).as_secs().max(0);
    match secs {
        0..120 => format!("{secs}s"),
        120..7200 => format!("{}m", secs / 60),
        7200..172_800 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// The `status` tables: nodes (mode, config, programmed, last sync, rules, drift, error)
/// and ProxyConfigs (mode, rollout).
pub(crate) fn status_tables(nodes: &Value, configs: &Value, now: SystemTime) -> String {
    let generation_of =
        |name: &str| arr(configs).iter().find(|c| c["name"] == name).and_then(|c| c["generation"].as_i64());
    let mut rows = vec![
        [
            "NODE",
            "READY",
            "MODE",
            "CONFIG",
            "PROGRAMMED",
            "LAST-SYNC",
            "RULES",
            "DRIFT-REPAIRS",
            "BGP",
            "ERROR",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for n in arr(nodes) {
        let r = &n["nodeProxyState"];
        let config = r["proxyConfig"].as_str().unwrap_or("-");
        let generation = r["proxyConfigGeneration"].as_i64();
        let programmed = match (r.is_null(), generation, generation_of(config)) {
            (true, _, _) => "no report",
            (_, Some(g), Some(want)) if g == want && r["ready"] == true => "yes",
            (_, Some(_), Some(_)) => "no",
            _ if r["ready"] == true => "yes",
            _ => "no",
        };
        rows.push(vec![
            s(&n["name"]).into(),
            if n["ready"] == true { "True".into() } else { "False".into() },
            r["mode"].as_str().unwrap_or("-").into(),
            match generation {
                Some(g) => format!("{config}@{g}"),
                None => config.into(),
            },
            programmed.into(),
            age(&r["lastSyncTime"], now),
            r["rules"].as_i64().map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
            r["driftRepairs"].as_i64().map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
            bgp_cell(&r["bgp"]),
            match (r["lastError"].as_str(), r["bgp"]["lastError"].as_str()) {
                (Some(e), _) => e.into(),
                (None, Some(e)) => format!("bgp: {e}"),
                (None, None) => "-".into(),
            },
        ]);
    }
    let mut out = table(&rows);
    let mut rows = vec![
        ["PROXYCONFIG", "MODE", "GENERATION", "SELECTED", "PROGRAMMED", "FAILING", "READY"]
            .map(String::from)
            .to_vec(),
    ];
    for c in arr(configs) {
        let st = &c["status"];
        let ready = arr(&st["conditions"]).iter().find(|x| x["type"] == "Ready");
        rows.push(vec![
            s(&c["name"]).into(),
            c["spec"]["mode"].as_str().unwrap_or("-").into(),
            c["generation"].to_string(),
            st["nodesSelected"].to_string(),
            st["nodesProgrammed"].to_string(),
            st["nodesFailing"].to_string(),
            match (ready, c["invalid"].as_str()) {
                (_, Some(why)) => format!("Invalid: {why}"),
                (Some(r), _) => format!("{} ({})", s(&r["status"]), s(&r["reason"])),
                (None, _) => "-".into(),
            },
        ]);
    }
    out.push('\n');
    out.push_str(&table(&rows));
    out
}

/// The BGP cell of a node's row: sessions established of those configured, and prefixes
/// advertised (`-` when its agent speaks no BGP).
fn bgp_cell(bgp: &Value) -> String {
    if bgp.is_null() {
        return "-".into();
    }
    let n = |k: &str| bgp[k].as_i64().unwrap_or(0);
    format!("{}/{} up, {} prefixes", n("established"), n("sessions"), n("prefixes"))
}

/// The `explain service` text.
pub(crate) fn explain_service(v: &Value) -> String {
    let mut t = String::new();
    let svc = &v["service"];
    let _ = writeln!(t, "Service {}/{}", s(&v["namespace"]), s(&v["name"]));
    let _ = writeln!(t, "  type:           {}", s(&svc["type"]));
    let ips: Vec<String> = arr(&svc["clusterIPs"]).iter().map(|x| s(x).to_string()).collect();
    let _ = writeln!(t, "  cluster IPs:    {}", if ips.is_empty() { "None".into() } else { ips.join(", ") });
    let lb: Vec<String> = arr(&svc["loadBalancerIPs"]).iter().map(|x| s(x).to_string()).collect();
    if !lb.is_empty() {
        let _ = writeln!(t, "  LoadBalancer:   {}", lb.join(", "));
    }
    for p in arr(&svc["ports"]) {
        let node_port = p["nodePort"].as_u64().map(|n| format!(", NodePort {n}")).unwrap_or_default();
        let _ = writeln!(
            t,
            "  port {:<9} {}/{}{node_port}",
            format!("{}:", p["name"].as_str().filter(|n| !n.is_empty()).unwrap_or("-")),
            p["port"],
            s(&p["protocol"]),
        );
    }
    let ext = svc["externalTrafficPolicy"].as_str().unwrap_or("Cluster");
    let _ = writeln!(t, "  externalTrafficPolicy: {ext}");
    let ann = &v["announcement"];
    if !ann.is_null() {
        let eligible: Vec<&str> = arr(&ann["eligible"]).iter().map(s).collect();
        let _ = writeln!(
            t,
            "  announced by:   {} (eligible: {})",
            ann["node"].as_str().unwrap_or("nobody"),
            eligible.join(", ")
        );
    }
    let programmed: Vec<&str> = arr(&v["programmedOn"]).iter().map(s).collect();
    let _ = writeln!(
        t,
        "  programmed on:  {}",
        if programmed.is_empty() { "-".into() } else { programmed.join(", ") }
    );
    let _ =
        writeln!(t, "  DNS names:      {}", arr(&v["dnsNames"]).iter().map(s).collect::<Vec<_>>().join(", "));
    explain_balancing(&mut t, v);
    let mut rows = vec![
        ["ENDPOINT", "NODE", "ZONE", "POD", "READY", "SERVING", "TERMINATING"].map(String::from).to_vec(),
    ];
    for e in arr(&v["endpoints"]) {
        rows.push(vec![
            arr(&e["addresses"]).iter().map(s).collect::<Vec<_>>().join(","),
            e["node"].as_str().unwrap_or("-").into(),
            e["zone"].as_str().unwrap_or("-").into(),
            e["pod"].as_str().unwrap_or("-").into(),
            e["ready"].to_string(),
            e["serving"].to_string(),
            e["terminating"].to_string(),
        ]);
    }
    t.push('\n');
    if rows.len() == 1 {
        t.push_str("no endpoints\n");
    } else {
        t.push_str(&table(&rows));
    }
    t
}

/// The load-balancing lines of `explain service`: what was asked, what each node programs,
/// and why where it is not what was asked.
fn explain_balancing(t: &mut String, v: &Value) {
    let asked = match v["loadBalancingAsked"].as_str() {
        Some(a) => format!("{a} (tideway.io/load-balancing)"),
        None => "the nodes' default".into(),
    };
    let _ = writeln!(t, "  load balancing: {asked}");
    for b in arr(&v["loadBalancing"]) {
        let nodes: Vec<&str> = arr(&b["nodes"]).iter().map(s).collect();
        let why = b["fallback"].as_str().map(|f| format!(": {f}")).unwrap_or_default();
        let _ = writeln!(t, "    {} on {}{why}", s(&b["algorithm"]), nodes.join(", "));
    }
}

/// Runs `tideway status`.
pub(crate) fn status(args: &StatusArgs) -> Result<i32> {
    let api = args.target.operator()?;
    let nodes = api.get("/api/v1/nodes")?;
    let configs = api.get("/api/v1/proxyconfigs")?;
    if args.json {
        println!("{}", serde_json::json!({"nodes": nodes, "proxyConfigs": configs}));
    } else {
        print!("{}", status_tables(&nodes, &configs, SystemTime::now()));
    }
    Ok(0)
}

/// Runs `tideway explain`.
pub(crate) fn explain(args: &ExplainArgs) -> Result<i32> {
    let Explain::Service { name, json, target } = &args.what;
    let (ns, name) = name.split_once('/').unwrap_or(("default", name));
    let api = target.operator()?;
    let view = api.get(&format!("/api/v1/services/{ns}/{name}"))?;
    if *json {
        println!("{view}");
    } else {
        print!("{}", explain_service(&view));
    }
    Ok(0)
}

/// Runs `tideway mode`: a merge patch of the ProxyConfig's mode over the operator's API.
pub(crate) fn mode(args: &ModeArgs) -> Result<i32> {
    let api = args.target.operator()?;
    let path = format!("/api/v1/proxyconfigs/{}", args.config);
    let answer = api.patch(&path, &serde_json::json!({"spec": {"mode": args.mode}}))?;
    println!(
        "proxyconfig/{} mode {} accepted (was generation {}); `tideway status` shows the rollout",
        args.config,
        answer["spec"]["mode"].as_str().unwrap_or(&args.mode),
        answer["basedOnGeneration"]
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    #[test]
    fn status_shows_each_node_and_config() {
        let nodes = json!([
            {"name": "n1", "ready": true, "nodeProxyState": {"mode": "nftables", "proxyConfig": "default",
              "proxyConfigGeneration": 3, "ready": true, "lastSyncTime": "2026-11-23T10:00:00Z", "rules": 42,
              "driftRepairs": 1}},
            {"name": "n2", "ready": true, "nodeProxyState": {"mode": "iptables", "proxyConfig": "default",
              "proxyConfigGeneration": 2, "ready": true, "lastSyncTime": "2026-11-23T09:50:00Z", "rules": 40,
              "driftRepairs": 0, "lastError": "iptables-restore: exit 1"}},
            {"name": "n3", "ready": false, "nodeProxyState": null},
            {"name": "n4", "ready": true, "nodeProxyState": {"mode": "nftables", "proxyConfig": "default",
              "proxyConfigGeneration": 3, "ready": true, "rules": 42, "driftRepairs": 0,
              "bgp": {"sessions": 2, "established": 1, "prefixes": 5, "lastError": "frr-reload.py: exit 1"}}},
        ]);
        let configs = json!([{"name": "default", "generation": 3, "spec": {"mode": "nftables"},
            "status": {"nodesSelected": 3, "nodesProgrammed": 1, "nodesFailing": 1,
                       "conditions": [{"type": "Ready", "status": "False", "reason": "NotAllNodesProgrammed"}]}}]);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_428_005); // 2026-11-23T10:00:05Z
        let text = status_tables(&nodes, &configs, now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            "n1     True    nftables   default@3   yes          5s          42      1               -                    -"
        );
        assert!(lines[2].starts_with("n2     True    iptables   default@2   no           10m "), "{text}");
        assert!(lines[2].ends_with("iptables-restore: exit 1"), "{text}");
        assert!(lines[3].starts_with("n3     False   -          -           no report    -"), "{text}");
        assert!(lines[4].ends_with("1/2 up, 5 prefixes   bgp: frr-reload.py: exit 1"), "{text}");
        assert!(text.contains("default       nftables   3            3          1            1         False (NotAllNodesProgrammed)"), "{text}");
    }

    #[test]
    fn explain_names_addresses_endpoints_and_announcer() {
        let view = json!({"namespace": "default", "name": "svc1",
            "service": {"type": "LoadBalancer", "clusterIPs": ["10.200.1.2"], "loadBalancerIPs": ["172.18.255.200"],
                        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
                        "externalTrafficPolicy": "Local"},
            "announcement": {"node": "w1", "eligible": ["w1", "w2"]},
            "programmedOn": ["w1", "w2"],
            "dnsNames": ["svc1.default.svc.cluster.local"],
            "endpoints": [{"addresses": ["10.10.1.5"], "node": "w1", "zone": null, "pod": "webpod1",
                           "ready": true, "serving": true, "terminating": false}]});
        let text = explain_service(&view);
        for want in [
            "Service default/svc1",
            "cluster IPs:    10.200.1.2",
            "LoadBalancer:   172.18.255.200",
            "port http:     80/TCP, NodePort 30080",
            "externalTrafficPolicy: Local",
            "announced by:   w1 (eligible: w1, w2)",
            "programmed on:  w1, w2",
            "10.10.1.5   w1     -      webpod1   true    true      false",
        ] {
            assert!(text.contains(want), "{want:?} in:\n{text}");
        }
    }

    #[test]
    fn explain_says_where_a_load_balancing_is_not_available() {
        let view = json!({"namespace": "default", "name": "web", "service": {"type": "ClusterIP"},
            "loadBalancingAsked": "maglev",
            "loadBalancing": [
                {"algorithm": "maglev (4093 buckets)", "fallback": null, "nodes": ["w1", "w2"]},
                {"algorithm": "random", "nodes": ["w3"],
                 "fallback": "load-balancing maglev is not available in iptables mode; using random"}]});
        let text = explain_service(&view);
        for want in [
            "  load balancing: maglev (tideway.io/load-balancing)\n",
            "    maglev (4093 buckets) on w1, w2\n",
            "    random on w3: load-balancing maglev is not available in iptables mode; using random\n",
        ] {
            assert!(text.contains(want), "{want:?} in:\n{text}");
        }
    }
}
