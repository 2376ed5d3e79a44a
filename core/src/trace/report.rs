//! Human-readable trace reports (`tideway trace`).

use std::fmt::Write as _;

use super::packet::Origin;
use super::path::{Step, Trace};
use crate::net::join_host_port;

/// Renders a trace: the packet, the rules common to every path, each path's own rules and
/// outcome, then the summarised verdict.
pub fn render_trace(t: &Trace) -> String {
    let p = &t.packet;
    let origin = match p.origin {
        Origin::Pod => "a pod",
        Origin::Node => "the node",
        Origin::External => "outside the node",
    };
    let src = match p.sport {
        Some(port) => join_host_port(&p.src, port),
        None => p.src.to_string(),
    };
    let arrives = t.input_interface.as_deref().map(|i| format!(", in on {i}")).unwrap_or_default();
    let mut out = format!(
        "packet {src} -> {}/{} from {origin}{arrives}\n",
        join_host_port(&p.dst, p.dport),
        p.protocol
    );
    let common = t
        .paths
        .first()
        .map(|first| {
            (0..first.steps.len())
                .take_while(|i| t.paths.iter().all(|path| path.steps.get(*i) == first.steps.get(*i)))
                .count()
        })
        .unwrap_or(0);
    let step_line = |out: &mut String, s: &Step, indent: &str| {
        let _ = write!(out, "{indent}{:<11} {:<40} {}", s.hook.as_str(), s.chain, s.rule);
        if let Some(n) = &s.note {
            let _ = write!(out, "   [{n}]");
        }
        out.push('\n');
    };
    if let Some(first) = t.paths.first() {
        for s in &first.steps[..common] {
            step_line(&mut out, s, "  ");
        }
    }
    if t.paths.len() > 1 {
        for (i, path) in t.paths.iter().enumerate() {
            let _ = writeln!(out, "  path {}/{} -> {}", i + 1, t.paths.len(), path.outcome);
            for s in &path.steps[common..] {
                step_line(&mut out, s, "    ");
            }
        }
    }
    let _ = writeln!(out, "verdict: {}", t.verdict());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Protocol;
    use crate::program::Hook;
    use crate::testing::ip;
    use crate::trace::{Outcome, Packet, TracePath};

    fn path(outcome: Outcome) -> TracePath {
        let step = super::super::Step {
            hook: Hook::Prerouting,
            chain: "tideway/services".into(),
            rule: "jump x".into(),
            note: None,
        };
        TracePath { steps: vec![step], outcome }
    }

    #[test]
    fn paths_and_verdicts_read_as_words() {
        let packet = Packet {
            src: ip("10.0.0.1"),
            dst: ip("10.96.0.10"),
            protocol: Protocol::Tcp,
            dport: 80,
            sport: None,
            origin: Origin::Pod,
        };
        let paths = vec![
            path(Outcome::Dnat { ip: ip("10.244.1.5"), port: 8080, masquerade: false }),
            path(Outcome::Reject),
        ];
        let text = render_trace(&Trace { packet, input_interface: Some("cbr0".into()), paths });
        assert!(text.starts_with("packet 10.0.0.1 -> 10.96.0.10:80/tcp from a pod, in on cbr0\n"), "{text}");
        assert!(text.contains("path 1/2 -> DNAT to 10.244.1.5:8080 (source kept)"), "{text}");
        assert!(text.contains("path 2/2 -> REJECT"), "{text}");
        assert!(
            text.ends_with("verdict: depends on the path: DNAT to 10.244.1.5:8080 (source kept) | REJECT\n"),
            "{text}"
        );
        assert!(!text.contains('{'), "no debug syntax: {text}");
    }
}
