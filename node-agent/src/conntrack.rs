//! UDP conntrack cleanup through the `conntrack` tool: list the flows, let core decide which
//! are stale, delete exactly those.

use std::net::IpAddr;

use tideway_core::conntrack::{Flow, stale_udp_flows};
use tideway_core::net::IpFamily;
use tideway_core::plan::Ruleset;

use crate::exec::{self, CommandError};

/// Parses `conntrack -L -p udp` output (one flow per line: the first `src=`/`dst=`/`sport=`/
/// `dport=` are the original direction, the second `src=`/`sport=` the reply).
pub fn parse(out: &str) -> Vec<Flow> {
    out.lines()
        .filter_map(|line| {
            let (mut src, mut dst, mut rsrc) = (Vec::new(), Vec::new(), Vec::new());
            let (mut sport, mut dport) = (Vec::new(), Vec::new());
            for w in line.split_whitespace() {
                if let Some(v) = w.strip_prefix("src=") {
                    src.push(v);
                } else if let Some(v) = w.strip_prefix("dst=") {
                    dst.push(v);
                } else if let Some(v) = w.strip_prefix("sport=") {
                    sport.push(v);
                } else if let Some(v) = w.strip_prefix("dport=") {
                    dport.push(v);
                }
            }
            if src.len() >= 2 {
                rsrc.push(src[1]);
            }
            Some(Flow {
                src: src.first()?.parse().ok()?,
                dst: dst.first()?.parse().ok()?,
                sport: sport.first()?.parse().ok()?,
                dport: dport.first()?.parse().ok()?,
                reply_src: rsrc.first()?.parse().ok()?,
                reply_sport: sport.get(1)?.parse().ok()?,
            })
        })
        .collect()
}

fn family_flag(ip: &IpAddr) -> &'static str {
    match IpFamily::of(ip) {
        IpFamily::V4 => "ipv4",
        IpFamily::V6 => "ipv6",
    }
}

/// Deletes stale UDP flows; returns how many were deleted.
pub fn clean(ruleset: &Ruleset) -> Result<usize, CommandError> {
    let mut flows = Vec::new();
    for fam in ["ipv4", "ipv6"] {
        match exec::run("conntrack", &["-L", "-p", "udp", "-f", fam], None) {
            Ok(out) => flows.extend(parse(&out)),
            // An empty table or an unloaded family is not an error worth failing a sync for.
            Err(e) if e.status.starts_with("exit status") => {}
            Err(e) => return Err(e),
        }
    }
    let stale = stale_udp_flows(ruleset, &flows);
    for f in &stale {
        let (src, dst, sport, dport) =
            (f.src.to_string(), f.dst.to_string(), f.sport.to_string(), f.dport.to_string());
        let args = [
            "-D",
            "-p",
            "udp",
            "-f",
            family_flag(&f.dst),
            "-s",
            &src,
            "-d",
            &dst,
            "--sport",
            &sport,
            "--dport",
            &dport,
        ];
        // "0 flow entries deleted" exits 1: the flow expired meanwhile, which is fine.
        let _ = exec::run("conntrack", &args, None);
    }
    Ok(stale.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_original_and_reply_directions() {
        let out = "udp      17 27 src=10.244.1.9 dst=10.96.0.53 sport=40000 dport=53 src=10.244.2.5 dst=10.244.1.9 sport=5353 dport=40000 mark=0 use=1\n\
                   udp      17 29 src=fd00::9 dst=fd00:96::53 sport=1 dport=53 [UNREPLIED] src=fd00:96::53 dst=fd00::9 sport=53 dport=1 mark=0 use=1\n\
                   garbage line\n";
        let flows = parse(out);
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[0].reply_src.to_string(), "10.244.2.5");
        assert_eq!((flows[0].dport, flows[0].reply_sport), (53, 5353));
        assert_eq!(flows[1].reply_src, flows[1].dst);
    }
}
