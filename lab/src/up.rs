//! `lab up`'s loop: build, forward the APIs, wait until the lab works, print the tour, then
//! keep the control plane current until Ctrl-C, SIGTERM or `lab down`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;

use crate::runner::Lab;
use crate::server::{self, Incoming, Request};
use crate::spec::LabSpec;
use crate::{proxy, tour};

/// How long `up` waits for the lab to work before printing the tour anyway.
const READY_WITHIN: Duration = Duration::from_secs(90);

async fn forward_apis(lab: &mut Lab) -> std::io::Result<()> {
    let local = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    for n in lab.world.nodes.clone() {
        let ns = lab.names.node(&n.name);
        lab.apis.insert(format!("agent/{}", n.name), proxy::forward(ns.clone(), local(10249)).await?);
        lab.apis.insert(format!("agent/{}/healthz", n.name), proxy::forward(ns, local(10256)).await?);
    }
    if lab.is_kube() {
        // The operator and DNS are the chart's Pods, wherever the scheduler put them.
        return Ok(());
    }
    lab.apis.insert("operator".into(), proxy::forward(lab.names.operator(), local(8080)).await?);
    if let Some(dns) = lab.world.pods.iter().find(|p| p.is_dns()).cloned() {
        let ns = lab.names.pod(&dns.namespace, &dns.name);
        lab.apis.insert("dns".into(), proxy::forward(ns.clone(), local(9154)).await?);
        lab.apis.insert("dns/metrics".into(), proxy::forward(ns.clone(), local(9153)).await?);
        lab.apis.insert("dns/ready".into(), proxy::forward(ns, local(8181)).await?);
    }
    Ok(())
}

/// Runs the lab until it is told to stop; tears it down; the exit code.
pub async fn serve(mut lab: Lab, spec: LabSpec, progress: bool) -> anyhow::Result<i32> {
    let started = Instant::now();
    let say = |msg: String| {
        if progress {
            println!("{msg}");
        }
    };
    say(format!(
        "tideway lab {}: {} nodes, {} pods, {} outside hosts; building the network and starting the components",
        lab.names.lab(),
        spec.nodes.len(),
        spec.pods.len(),
        spec.hosts.len()
    ));
    if let Err(e) = crate::token::make(lab.dir.path()) {
        return Err(anyhow::Error::from(e).context("writing the API token"));
    }
    if let Err(e) = crate::certs::make_all(lab.dir.path()) {
        return Err(anyhow::Error::from(e).context("making the lab's certificates"));
    }
    if let Err(e) = lab.apply(spec) {
        lab.teardown();
        return Err(e.into());
    }
    let (to_lab, mut requests) = mpsc::channel::<Incoming>(16);
    tokio::spawn(server::serve(server::socket_path(lab.dir.path()), to_lab));
    if let Err(e) = forward_apis(&mut lab).await {
        lab.teardown();
        return Err(e.into());
    }
    let mut said = String::new();
    loop {
        if let Err(e) = lab.tick() {
            tracing::warn!(error = %e, "lab tick");
        }
        let (ready, what) = tour::readiness(&lab.status());
        if what != said {
            say(format!("  {what}"));
            said = what;
        }
        if ready || started.elapsed() > READY_WITHIN {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    say(tour::tour(&lab.status(), started.elapsed()));
    std::fs::write(lab.dir.path().join("ready"), format!("{}\n", std::process::id()))?;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let stop = tideway_sources::shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = lab.tick() {
                    tracing::warn!(error = %e, "lab tick");
                }
            }
            Some((req, reply)) = requests.recv() => {
                let down = matches!(req, Request::Down);
                let answer = match req {
                    Request::Status => Ok(lab.status()),
                    Request::Down => Ok(json!({"down": lab.names.lab()})),
                    Request::Fault { fault } => lab.fault(&fault),
                    Request::Apply { file, text, how } => match lab.changed_spec(&file, &text, how) {
                        Err(e) => Err(e),
                        Ok(spec) => lab.apply(spec).map(|()| json!({"applied": file})),
                    },
                };
                let _ = reply.send(answer);
                if down {
                    break;
                }
            }
            _ = &mut stop => break,
        }
    }
    say(format!("tideway lab {}: tearing down", lab.names.lab()));
    lab.teardown();
    let _ = std::fs::remove_file(server::socket_path(lab.dir.path()));
    Ok(0)
}
