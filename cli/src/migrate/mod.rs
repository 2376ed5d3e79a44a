//! `tideway migrate`: reads what kube-proxy, CoreDNS and MetalLB run on (a
//! `KubeProxyConfiguration` or its ConfigMap, a Corefile, MetalLB's `IPAddressPool`s and
//! `L2Advertisement`s) from files or from a running cluster, and prints the Tideway objects and chart values that do the
//! same, with a table of every setting it could not carry and why.
//!
//! files, or the cluster ([`cluster`]) -> [`kube_proxy`] / [`corefile`] / MetalLB objects
//! ([`tideway_api::crd::load_balancer_pools`]) -> objects + [`Values`] + [`Left`] rows ->
//! `objects.yaml`, `values.yaml` and the table.

pub(crate) mod cluster;
pub(crate) mod corefile;
mod error;
pub(crate) mod kube_proxy;
mod left;
mod parse;
mod values;

use std::path::PathBuf;

use serde_json::Value;
use tideway_api::crd::{IPAddressPool, L2Advertisement, load_balancer_pools};

pub(crate) use error::MigrateError;
pub(crate) use left::Left;
pub(crate) use parse::parse_yaml;
pub(crate) use values::Values;

/// `tideway migrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct MigrateArgs {
    /// kube-proxy's configuration: a `KubeProxyConfiguration` file, or its ConfigMap
    /// (`kubectl -n kube-system get configmap kube-proxy -o yaml`).
    #[arg(long)]
    kube_proxy_config: Option<PathBuf>,
    /// CoreDNS's Corefile (`kubectl -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}'`).
    #[arg(long)]
    corefile: Option<PathBuf>,
    /// MetalLB's objects (`kubectl get ipaddresspools,l2advertisements -A -o yaml`; other
    /// MetalLB kinds are named in the table).
    #[arg(long)]
    metallb: Option<PathBuf>,
    /// Read every input from the cluster of the current kubeconfig context (kube-system's
    /// `kube-proxy` and `coredns` ConfigMaps, MetalLB's objects in any namespace); a file
    /// option given beside it replaces that input.
    #[arg(long)]
    from_cluster: bool,
    /// The kubeconfig for `--from-cluster`, which it implies (default: `KUBECONFIG`,
    /// `~/.kube/config`, then the in-cluster ServiceAccount).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Write `objects.yaml` (for `kubectl apply -f`) and `values.yaml` (for `helm --values`)
    /// here instead of printing them.
    #[arg(long)]
    out: Option<PathBuf>,
}

impl MigrateArgs {
    fn reads_the_cluster(&self) -> bool {
        self.from_cluster || self.kubeconfig.is_some()
    }
}

/// MetalLB's objects: `LoadBalancerPool`s for its pools, rows for the rest.
fn metallb(text: &str) -> Result<(Vec<Value>, Vec<Left>), MigrateError> {
    let mut objects = Vec::new();
    for doc in text.split("\n---").filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.starts_with('#')))
    {
        let v = parse_yaml("MetalLB objects", doc)?;
        match v["items"].as_array() {
            Some(items) if v["kind"] == "List" => objects.extend(items.iter().cloned()),
            _ => objects.push(v),
        }
    }
    let (mut pools, mut ads, mut left) = (Vec::new(), Vec::new(), Vec::new());
    let bad = |e: serde_json::Error| MigrateError::Input("MetalLB objects".into(), e.to_string());
    for o in objects {
        let name = format!(
            "{} {}/{}",
            o["kind"].as_str().unwrap_or("?"),
            o["metadata"]["namespace"].as_str().unwrap_or("default"),
            o["metadata"]["name"].as_str().unwrap_or("?")
        );
        match o["kind"].as_str() {
            Some("IPAddressPool") => pools.push(serde_json::from_value::<IPAddressPool>(o).map_err(bad)?),
            Some("L2Advertisement") => ads.push(serde_json::from_value::<L2Advertisement>(o).map_err(bad)?),
            Some("BGPAdvertisement" | "BGPPeer" | "BFDProfile" | "Community") => left.push(Left::new(
                "MetalLB",
                &name,
                &Value::Null,
                "Tideway announces over layer 2 only (no BGP)",
            )),
            _ => left.push(Left::new("MetalLB", &name, &Value::Null, "not a MetalLB kind Tideway reads")),
        }
    }
    let (written, conflicts) = load_balancer_pools(&pools, &ads)
        .map_err(|e| MigrateError::Input("MetalLB objects".into(), e.to_string()))?;
    for c in conflicts {
        left.push(Left::new(
            "MetalLB",
            &format!("IPAddressPool {}/{}", c.ignored, c.name),
            &Value::Null,
            &format!("{}: rename one (pool names are cluster-wide in Tideway)", c.message()),
        ));
    }
    // By name: the same objects whichever order the inputs came in (files keep theirs, the
    // API server lists by namespace and name).
    let mut objects: Vec<Value> =
        written.iter().map(|p| serde_json::to_value(p).map_err(bad)).collect::<Result<_, _>>()?;
    objects.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
    Ok((objects, left))
}

/// Everything the inputs become.
#[derive(Debug, Default)]
pub(crate) struct Migration {
    /// Tideway objects.
    pub(crate) objects: Vec<Value>,
    /// Chart values.
    pub(crate) values: Values,
    /// Settings not carried.
    pub(crate) left: Vec<Left>,
}

fn read(path: &PathBuf) -> Result<String, MigrateError> {
    std::fs::read_to_string(path).map_err(|e| MigrateError::Read(path.clone(), e))
}

/// The inputs' texts: from the files given, the rest from the cluster when asked (what it
/// lacks is in `absent`).
pub(crate) fn inputs(args: &MigrateArgs) -> Result<cluster::Found, MigrateError> {
    let mut found = if args.reads_the_cluster() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| MigrateError::Input("the cluster".into(), e.to_string()))?;
        runtime.block_on(async {
            let client = tideway_sources::kube::client(args.kubeconfig.as_deref()).await?;
            cluster::read(client).await
        })?
    } else {
        cluster::Found::default()
    };
    let file = |path: &Option<PathBuf>| path.as_ref().map(read).transpose();
    found.kube_proxy = file(&args.kube_proxy_config)?.or(found.kube_proxy);
    found.corefile = file(&args.corefile)?.or(found.corefile);
    found.metallb = file(&args.metallb)?.or(found.metallb);
    Ok(found)
}

/// Converts every input found.
pub(crate) fn migrate(found: &cluster::Found) -> Result<Migration, MigrateError> {
    let mut m = Migration::default();
    if let Some(text) = &found.kube_proxy {
        let c = kube_proxy::convert(text)?;
        m.objects.push(
            serde_json::to_value(&c.config)
                .map_err(|e| MigrateError::Input("ProxyConfig".into(), e.to_string()))?,
        );
        m.values = c.values;
        m.left.extend(c.left);
    }
    if let Some(text) = &found.corefile {
        let c = corefile::convert(text)?;
        m.values.dns = c.values.dns;
        m.values.dns_args = c.values.dns_args;
        m.left.extend(c.left);
    }
    if let Some(text) = &found.metallb {
        let (objects, left) = metallb(text)?;
        m.objects.extend(objects);
        m.left.extend(left);
    }
    Ok(m)
}

/// The table of settings not carried.
pub(crate) fn table(left: &[Left]) -> String {
    let mut out = String::from("| from | setting | value | not carried because |\n|---|---|---|---|\n");
    for l in left {
        let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            l.source,
            cell(&l.setting),
            cell(&l.value),
            cell(&l.why)
        ));
    }
    if left.is_empty() {
        out.push_str("| | (everything was carried) | | |\n");
    }
    out
}

fn yaml_stream(objects: &[Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(o)?);
    }
    Ok(out)
}

/// Runs `tideway migrate`.
pub(crate) fn run(args: &MigrateArgs) -> anyhow::Result<i32> {
    if !args.reads_the_cluster()
        && args.kube_proxy_config.is_none()
        && args.corefile.is_none()
        && args.metallb.is_none()
    {
        anyhow::bail!(
            "nothing to migrate: give --from-cluster (or --kubeconfig FILE), --kube-proxy-config, --corefile and/or --metallb"
        );
    }
    let found = inputs(args)?;
    for absent in &found.absent {
        eprintln!("not in the cluster: {absent}");
    }
    let m = migrate(&found)?;
    let objects = yaml_stream(&m.objects)?;
    let values = serde_saphyr::to_string(&m.values.to_value())?;
    match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            std::fs::write(dir.join("objects.yaml"), &objects)?;
            std::fs::write(dir.join("values.yaml"), &values)?;
            println!(
                "wrote {} (kubectl apply -f, after the chart is installed) and {} (helm --values)\n",
                dir.join("objects.yaml").display(),
                dir.join("values.yaml").display()
            );
        }
        None => println!(
            "# Tideway objects (kubectl apply -f)\n{objects}\n# Chart values (helm --values)\n{values}"
        ),
    }
    print!("{}", table(&m.left));
    Ok(0)
}
