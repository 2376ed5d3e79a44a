//! `tideway lab up | exec | apply | status | down`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::faults::{Fault, NODE_MONITOR_GRACE};
use crate::runner::Lab;
use crate::server::{self, Request};
use crate::spec::{Change, LabSpec};
use crate::{netns, tour};

/// The built-in demo (seed 003's setup).
pub const DEMO: &str = include_str!("../../examples/demo.yaml");

/// Where running labs keep their directory.
pub const STATE_ROOT: &str = "/run/tideway-lab";

/// Run the whole system on this host, in network namespaces.
#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// Build the lab and run it (Ctrl-C tears it down unless --detach).
    Up {
        /// Lab file (default: the built-in demo).
        #[arg(short = 'f', long)]
        file: Option<PathBuf>,
        /// Proxy mode of every node (default: the file's ProxyConfigs).
        #[arg(long, value_parser = ["iptables", "nftables", "ipvs"])]
        mode: Option<String>,
        /// Return once the lab is up; it keeps running in the background.
        #[arg(long)]
        detach: bool,
        /// The lab's name (several labs can run side by side).
        #[arg(long, default_value = "demo")]
        name: String,
        /// How long a node cut off from the control plane (`lab node NODE down`, `lab
        /// partition NODE`) stays Ready, as Kubernetes' node lifecycle controller's flag of the
        /// same name (default 50s).
        #[arg(long, value_parser = tideway_api::duration::parse_duration)]
        node_monitor_grace_period: Option<Duration>,
        /// Run a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
        /// kube-scheduler, built by `make kube`) with a lab kubelet per node, and Tideway as the
        /// chart's Pods; the admin kubeconfig is the lab directory's `kubeconfig`.
        #[arg(long)]
        kube: bool,
        /// With --kube: the kubelets rewrite projected ServiceAccount tokens this often instead
        /// of at 80 % of their lifetime (tests).
        #[arg(long, value_parser = tideway_api::duration::parse_duration, hide = true)]
        token_rotation: Option<Duration>,
        /// With --kube: load this image archive (`make image` writes it) before the chart is
        /// applied, so the chart's Pods run from it as containers under runc (without it they
        /// run the build's `tideway`).
        #[arg(long, requires = "kube")]
        image: Option<PathBuf>,
        /// With --kube: start the cluster without Tideway, for `helm install` to bring it
        /// (kubeadm's Service CIDR 10.96.0.0/12 and DNS address 10.96.0.10, the chart's
        /// defaults; the file's ProxyConfigs are left to the chart and its other tideway.io
        /// objects wait until their CRDs are served).
        #[arg(long, requires = "kube")]
        no_components: bool,
        /// With --kube: run these peers as Pods from their own images (`make peers` builds
        /// them) and manifests: `kube-proxy` and `coredns` by kubeadm's addon phases, `metallb`
        /// (L2) by its metallb-native.yaml. Beside Tideway (without --no-components) kube-proxy
        /// and MetalLB's speaker run on the nodes the file labels `lab.tideway.io/peers: "true"`
        /// and Tideway's agents on the others; CoreDNS only with --no-components.
        #[arg(long, requires = "kube", value_delimiter = ',', value_parser = crate::kube::peers::Peer::parse)]
        peers: Vec<crate::kube::peers::Peer>,
        /// Set by `--detach` for the process it starts: the lab directory is already prepared.
        #[arg(long, hide = true)]
        background: bool,
    },
    /// Kill a node's agent (SIGKILL); its Node stays Ready, and it stays down until `lab start`
    /// (in a kube lab, until its kubelet restarts it). `speaker`: MetalLB's speaker, in a kube
    /// lab running it (`--peers metallb`).
    Kill {
        /// What to kill.
        #[arg(value_parser = ["agent", "speaker"])]
        what: String,
        /// The node.
        node: String,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Start a node's agent again (after `lab kill agent`).
    Start {
        /// What to start.
        #[arg(value_parser = ["agent"])]
        what: String,
        /// The node.
        node: String,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Take a node's link to the node network down or up; a node down is cut off from the
    /// control plane and turns NotReady after the grace period.
    Node {
        /// The node.
        node: String,
        /// `down` or `up`.
        #[arg(value_parser = ["down", "up"])]
        state: String,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Cut a node off from the other nodes and the control plane; outside hosts still reach it.
    Partition {
        /// The node.
        node: String,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Undo `lab partition`.
    Heal {
        /// The node.
        node: String,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Make the API server unreachable for every component (`down`) or reachable again (`up`);
    /// in a kube lab it refuses every node and pod, its kubelets too, and keeps its loopback
    /// for the controller-manager, the scheduler and `lab`'s own commands.
    Api {
        /// `down` or `up`.
        #[arg(value_parser = ["down", "up"])]
        state: String,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Run a command in a node's, pod's or host's namespace (with its resolv.conf).
    Exec {
        /// A node, pod (`name` or `namespace/name`) or host.
        target: String,
        /// The command.
        #[arg(last = true, required = true)]
        command: Vec<String>,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Add the objects of a file to the running lab, or update those of the same kind and
    /// name (as `kubectl apply -f`).
    Apply {
        /// The file.
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Remove the objects a file names from the running lab (as `kubectl delete -f`).
    Delete {
        /// The file.
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Make the running lab exactly a lab file (objects not in it are removed).
    Replace {
        /// The lab file.
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Nodes, modes, Services with their addresses and announcers, pods, APIs.
    Status {
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a pod fail its readiness probe (`unready`) or pass it again (`ready`), in a lab
    /// run with the lab's kubelet.
    Pod {
        /// The pod (`namespace/name`, or `name` in `default`).
        pod: String,
        /// `unready` or `ready`.
        #[arg(value_parser = ["unready", "ready"])]
        state: String,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Make an image available to every node of a kube lab, as `kind load image-archive`
    /// does: a Pod naming it runs it as a container under runc.
    Load {
        /// What to load.
        #[command(subcommand)]
        what: LoadCommand,
    },
    /// Install peers in a running kube lab from their own images and manifests, as `lab up
    /// --peers` does (to bring them back after a migration away from them, say).
    Peers {
        /// The peers: kube-proxy, coredns, metallb.
        #[arg(value_delimiter = ',', value_parser = crate::kube::peers::Peer::parse, required = true)]
        peers: Vec<crate::kube::peers::Peer>,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
    /// Run the lab's kubelet for one node (started by the lab, inside the node's namespace).
    #[command(hide = true)]
    Kubelet {
        /// Its configuration (JSON).
        #[arg(long)]
        config: PathBuf,
    },
    /// Run one container of a pod (started by the lab's kubelet).
    #[command(hide = true)]
    Container {
        /// The container's spec (JSON).
        #[arg(long)]
        spec: PathBuf,
    },
    /// Remove everything the lab made (idempotent; works after a crash).
    Down {
        /// The lab (default: every lab).
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum LoadCommand {
    /// An OCI image archive (`make image` writes one), under the names it carries.
    Image {
        /// The archive.
        file: PathBuf,
        /// Another name for it (`registry/repository:tag`).
        #[arg(long = "as")]
        reference: Vec<String>,
        /// The lab (default: the only one running).
        #[arg(long)]
        name: Option<String>,
    },
}

fn require_root() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "tideway lab needs root (CAP_NET_ADMIN, to create network namespaces and program their rules); run it with sudo"
        );
    }
    Ok(())
}

fn require_ipvs() -> anyhow::Result<()> {
    let _ = std::process::Command::new("modprobe").args(["-q", "ip_vs"]).status();
    ipvs_present(Path::new("/proc/net/ip_vs"))
}

/// IPVS is there when the kernel shows `proc` (its `/proc/net/ip_vs`).
fn ipvs_present(proc: &Path) -> anyhow::Result<()> {
    if !proc.exists() {
        bail!(
            "--mode ipvs needs a kernel with IPVS (CONFIG_IP_VS); this kernel has none: use iptables or nftables"
        );
    }
    Ok(())
}

fn lab_dir(name: &str) -> PathBuf {
    Path::new(STATE_ROOT).join(name)
}

/// Running labs (a control socket that answers).
fn running() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(STATE_ROOT) else { return Vec::new() };
    dir.flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| server::request(&lab_dir(n), &Request::Status).is_ok())
        .collect()
}

fn pick(name: Option<String>) -> anyhow::Result<String> {
    if let Some(n) = name {
        return Ok(n);
    }
    match running().as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("no lab is running (start one with `tideway lab up`)"),
        many => bail!("several labs run ({}): say which with --name", many.join(", ")),
    }
}

/// Runs `tideway lab ...`.
pub fn run(args: &LabArgs) -> anyhow::Result<i32> {
    match &args.command {
        LabCommand::Up {
            file,
            mode,
            detach,
            name,
            node_monitor_grace_period,
            kube,
            token_rotation,
            image,
            no_components,
            peers,
            background,
        } => {
            let opts = UpOptions {
                no_components: *no_components,
                peers: peers.clone(),
                mode: mode.clone(),
                detach: *detach,
                grace: node_monitor_grace_period.unwrap_or(NODE_MONITOR_GRACE),
                kube: kube.then_some(*token_rotation),
                image: image.clone(),
                background: *background,
            };
            up(file.as_deref(), opts, name)
        }
        LabCommand::Kill { what, node, name } if what == "speaker" => {
            fault(name, Fault::KillSpeaker { node: node.clone() })
        }
        LabCommand::Kill { node, name, .. } => fault(name, Fault::KillAgent { node: node.clone() }),
        LabCommand::Start { node, name, .. } => fault(name, Fault::StartAgent { node: node.clone() }),
        LabCommand::Node { node, state, name } => {
            fault(name, Fault::NodeLink { node: node.clone(), up: state == "up" })
        }
        LabCommand::Partition { node, name } => {
            fault(name, Fault::Partition { node: node.clone(), heal: false })
        }
        LabCommand::Heal { node, name } => fault(name, Fault::Partition { node: node.clone(), heal: true }),
        LabCommand::Api { state, name } => fault(name, Fault::Api { up: state == "up" }),
        LabCommand::Exec { target, command, name } => exec(&pick(name.clone())?, target, command),
        LabCommand::Apply { file, name } => change(file, name, Change::Apply),
        LabCommand::Delete { file, name } => change(file, name, Change::Delete),
        LabCommand::Replace { file, name } => change(file, name, Change::Replace),
        LabCommand::Status { name, json } => {
            let status = server::request(&lab_dir(&pick(name.clone())?), &Request::Status)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", tour::status_tables(&status));
            }
            Ok(0)
        }
        LabCommand::Pod { pod, state, name } => pod_readiness(name, pod, state == "unready"),
        LabCommand::Load { what: LoadCommand::Image { file, reference, name } } => {
            let lab = pick(name.clone())?;
            let store = crate::images::Store::new(lab_dir(&lab).join("images"));
            for n in store.load(file, reference)? {
                println!("loaded {n} into lab {lab}");
            }
            Ok(0)
        }
        LabCommand::Peers { peers, name } => install_peers(&pick(name.clone())?, peers),
        LabCommand::Kubelet { config } => crate::kubelet::main(config),
        LabCommand::Container { spec } => crate::kubelet::runtime::run_helper(spec),
        LabCommand::Down { name } => down(name.as_deref()),
    }
}

fn pod_readiness(name: &Option<String>, pod: &str, unready: bool) -> anyhow::Result<i32> {
    let name = pick(name.clone())?;
    let (ns, pod) = pod.split_once('/').unwrap_or(("default", pod));
    let nodes = crate::kubelet::flag_unready(&lab_dir(&name), ns, pod, unready).unwrap_or_default();
    if nodes.is_empty() {
        bail!(
            "lab {name}: no node runs pod {ns}/{pod} (the lab's kubelet runs pods in a lab up with --kube)"
        );
    }
    let what = if unready { "fails its readiness probe" } else { "passes its readiness probe again" };
    println!("lab {name}: pod {ns}/{pod} on {} {what}", nodes.join(", "));
    Ok(0)
}

fn fault(name: &Option<String>, fault: Fault) -> anyhow::Result<i32> {
    let name = pick(name.clone())?;
    server::request(&lab_dir(&name), &Request::Fault { fault: fault.clone() })?;
    let what = match &fault {
        Fault::KillAgent { node } => format!("agent on {node} killed (its Node stays Ready)"),
        Fault::KillSpeaker { node } => format!("MetalLB's speaker on {node} killed (its Node stays Ready)"),
        Fault::StartAgent { node } => format!("agent on {node} started"),
        Fault::NodeLink { node, up: false } => format!("node {node} down"),
        Fault::NodeLink { node, up: true } => format!("node {node} up"),
        Fault::Partition { node, heal: false } => format!("node {node} partitioned"),
        Fault::Partition { node, heal: true } => format!("node {node} healed"),
        Fault::Api { up: false } => "API server down".to_string(),
        Fault::Api { up: true } => "API server up".to_string(),
    };
    println!("lab {name}: {what}");
    Ok(0)
}

fn down(name: Option<&str>) -> anyhow::Result<i32> {
    require_root()?;
    let mut names: Vec<String> = match name {
        Some(n) => vec![n.to_string()],
        None => std::fs::read_dir(STATE_ROOT)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default(),
    };
    if name.is_none() {
        for ns in netns::namespaces("tw-") {
            if let Some(lab) = ns.strip_prefix("tw-").and_then(|r| r.strip_suffix("-lan")) {
                names.push(lab.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    for n in &names {
        let dir = lab_dir(n);
        if server::request(&dir, &Request::Down).is_ok() {
            // The lab tears itself down; wait for its socket to go.
            let deadline = Instant::now() + Duration::from_secs(10);
            while server::socket_path(&dir).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        crate::kubelet::runc::remove_all(&dir);
        let removed = netns::remove_all(&format!("tw-{n}-"));
        crate::frr::remove_run_dirs(&format!("tw-{n}-"));
        let _ = std::fs::remove_dir_all(&dir);
        println!("lab {n}: down ({removed} namespaces removed)");
    }
    if names.is_empty() {
        println!("no lab to take down");
    }
    Ok(0)
}

fn exec(name: &str, target: &str, command: &[String]) -> anyhow::Result<i32> {
    require_root()?;
    let prefix = format!("tw-{name}-");
    let all = netns::namespaces(&prefix);
    let (ns_part, pod) = target.split_once('/').map_or((None, target), |(a, b)| (Some(a), b));
    let candidates: Vec<&String> = all
        .iter()
        .filter(|ns| {
            let rest = &ns[prefix.len()..];
            match ns_part {
                Some(n) => rest == format!("p-{n}-{pod}"),
                None => {
                    rest == format!("n-{target}")
                        || rest == format!("h-{target}")
                        || rest == format!("r-{target}")
                        || (rest.starts_with("p-") && rest.ends_with(&format!("-{target}")))
                }
            }
        })
        .collect();
    let ns = match candidates.as_slice() {
        [one] => (*one).clone(),
        [] => bail!("lab {name} has no node, pod, host or router called {target:?}"),
        many => bail!(
            "{target:?} is ambiguous in lab {name}: {}",
            many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ),
    };
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new("ip").args(["netns", "exec", &ns]).args(command).exec();
    bail!("cannot run ip netns exec: {err}")
}

/// How `lab up` runs.
struct UpOptions {
    mode: Option<String>,
    detach: bool,
    grace: Duration,
    /// A kube lab, with the kubelets' token rotation period if any.
    kube: Option<Option<Duration>>,
    /// An image archive to load before the chart's Pods start.
    image: Option<PathBuf>,
    /// A kube lab without Tideway.
    no_components: bool,
    /// The peers run as Pods.
    peers: Vec<crate::kube::peers::Peer>,
    background: bool,
}

fn up(file: Option<&Path>, opts: UpOptions, name: &str) -> anyhow::Result<i32> {
    let UpOptions { mode, detach, grace, kube, image, no_components, peers, background } = opts;
    require_root()?;
    if mode.as_deref() == Some("ipvs") {
        require_ipvs()?;
    }
    let (file_name, text) = match file {
        Some(f) => (
            f.display().to_string(),
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        ),
        None => ("the built-in demo".to_string(), DEMO.to_string()),
    };
    let spec = LabSpec::parse(&file_name, &text)?;
    if spec.proxy_configs.iter().any(|p| p.spec.mode.as_deref() == Some("ipvs")) && mode.is_none() {
        require_ipvs()?;
    }
    let dir = lab_dir(name);
    // Held by this process until it has started the lab's own process (which takes it then) or,
    // in the foreground, until the lab is gone.
    let lock = crate::name_lock::NameLock::take(name)?;
    if !background {
        if server::request(&dir, &Request::Status).is_ok() {
            bail!(
                "lab {name} is already running (`tideway lab status --name {name}`, `tideway lab down --name {name}`)"
            );
        }
        // Leftovers of a lab that crashed.
        netns::remove_all(&format!("tw-{name}-"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if let Some(archive) = &image {
            load_tideway_image(&dir, archive)?;
        }
        if !peers.is_empty() {
            let store = crate::images::Store::new(dir.join("images"));
            let names = crate::kube::peers::load_images(&store, &crate::kube::peers::images_dir()?, &peers)?;
            println!("loaded {} for the peers' Pods", names.join(", "));
        }
    }
    let bin = std::env::current_exe().context("locating the tideway binary")?;
    if detach {
        drop(lock);
        return detached(&bin, file, mode.as_deref(), grace, (kube, no_components, &peers), name, &dir);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut lab = Lab::new(name, dir.clone(), bin, mode);
    lab.set_node_grace(grace);
    if let Some(rotation) = kube {
        lab.set_kube(rotation);
    }
    if no_components {
        lab.set_no_components();
    }
    lab.set_peers(peers);
    let code = rt.block_on(crate::up::serve(lab, spec, true));
    let _ = std::fs::remove_dir_all(&dir);
    drop(lock);
    code
}

/// `lab peers`: loads the peers' images into lab `name` and installs them from their manifests.
fn install_peers(name: &str, peers: &[crate::kube::peers::Peer]) -> anyhow::Result<i32> {
    use crate::kube::peers::{Install, images_dir, load_images};
    let dir = lab_dir(name);
    let status = server::request(&dir, &Request::Status)?;
    if status["kube"] != true {
        bail!("lab {name} is not a kube lab (`lab up --kube`)");
    }
    let store = crate::images::Store::new(dir.join("images"));
    let from = images_dir()?;
    let loaded = load_images(&store, &from, peers)?;
    println!("loaded {} for the peers' Pods", loaded.join(", "));
    let kubeconfig = dir.join("kubeconfig");
    let kubeadm_config = crate::kube::Layout { dir: dir.clone() }.kubeadm_config();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let client = crate::kube::client_from(&kubeconfig).await?;
        let install = Install {
            kubeadm_config: &kubeadm_config,
            client: &client,
            kubeconfig: &kubeconfig,
            dir: &from,
            images: &store.names(),
            beside_tideway: status["components"] == true,
        };
        install.run(peers).await
    })?;
    println!("installed {} in lab {name}", peers.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "));
    Ok(0)
}

/// Loads `archive` into the image store of lab directory `dir`; it must carry the chart's
/// image, or the chart's Pods would silently run something else.
fn load_tideway_image(dir: &Path, archive: &Path) -> anyhow::Result<()> {
    let store = crate::images::Store::new(dir.join("images"));
    let names = store.load(archive, &[]).with_context(|| format!("loading {}", archive.display()))?;
    let chart_image = format!("{}:{}", crate::kubelet::config::TIDEWAY_IMAGE, env!("CARGO_PKG_VERSION"));
    if store.find(&chart_image).is_none() {
        bail!(
            "{} holds {}, not the chart's image {chart_image} (`make image` builds it)",
            archive.display(),
            names.join(", ")
        );
    }
    println!("loaded {} for the chart's Pods", names.join(", "));
    Ok(())
}

/// Runs `lab up` in a new session, waits until it says it is ready, prints its tour.
fn detached(
    bin: &Path,
    file: Option<&Path>,
    mode: Option<&str>,
    grace: Duration,
    (kube, no_components, peers): (Option<Option<Duration>>, bool, &[crate::kube::peers::Peer]),
    name: &str,
    dir: &Path,
) -> anyhow::Result<i32> {
    let log = std::fs::File::create(dir.join("lab.log"))?;
    let mut cmd = std::process::Command::new("setsid");
    cmd.arg(bin).args(["lab", "up", "--background", "--name", name]);
    cmd.arg("--node-monitor-grace-period").arg(format!("{}ms", grace.as_millis()));
    if let Some(rotation) = kube {
        cmd.arg("--kube");
        if let Some(r) = rotation {
            cmd.arg("--token-rotation").arg(format!("{}ms", r.as_millis()));
        }
        if no_components {
            cmd.arg("--no-components");
        }
        if !peers.is_empty() {
            cmd.arg("--peers").arg(peers.iter().map(|p| p.name()).collect::<Vec<_>>().join(","));
        }
    }
    if let Some(f) = file {
        cmd.arg("-f").arg(std::fs::canonicalize(f)?);
    }
    if let Some(m) = mode {
        cmd.args(["--mode", m]);
    }
    let mut child = cmd.stdin(std::process::Stdio::null()).stdout(log.try_clone()?).stderr(log).spawn()?;
    let started = Instant::now();
    let mut shown = 0;
    let show_log = |shown: &mut usize| {
        let text = std::fs::read_to_string(dir.join("lab.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[(*shown).min(lines.len())..] {
            println!("{l}");
        }
        *shown = lines.len();
        let _ = std::io::stdout().flush();
    };
    loop {
        show_log(&mut shown);
        // The lab's process writes its pid there: a `ready` of any other process is not this lab's.
        let ready = std::fs::read_to_string(dir.join("ready")).unwrap_or_default();
        if ready.trim() == child.id().to_string() {
            return Ok(0);
        }
        if let Ok(Some(status)) = child.try_wait() {
            // What it wrote between the last look and its end.
            show_log(&mut shown);
            bail!("lab up stopped ({status}); its log is above");
        }
        if started.elapsed() > Duration::from_secs(180) {
            bail!("the lab did not come up within 3 minutes (log: {})", dir.join("lab.log").display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The lab's status for scripts: the JSON `lab status --json` prints.
pub fn status_json(name: &str) -> anyhow::Result<Value> {
    Ok(server::request(&lab_dir(name), &Request::Status)?)
}

/// `lab apply`, `lab delete` or `lab replace` of `file`: read and checked here, merged into
/// the running lab by the lab (which refuses a result that is no lab, changing nothing).
fn change(file: &Path, name: &Option<String>, how: Change) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let shown = file.display().to_string();
    match how {
        Change::Replace => _ = LabSpec::parse(&shown, &text)?,
        Change::Apply | Change::Delete => _ = LabSpec::parse_objects(&shown, &text)?,
    }
    let name = pick(name.clone())?;
    server::request(&lab_dir(&name), &Request::Apply { file: shown, text, how })?;
    let done = match how {
        Change::Replace => "replaced by",
        Change::Apply => "applied",
        Change::Delete => "deleted the objects of",
    };
    println!("lab {name}: {done} {}", file.display());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_ipvs_is_named_for_what_it_lacks() {
        let e = ipvs_present(Path::new("/nonexistent/ip_vs")).unwrap_err().to_string();
        assert!(e.contains("CONFIG_IP_VS") && e.contains("iptables or nftables"), "{e}");
        assert!(ipvs_present(Path::new("/")).is_ok());
    }
}
