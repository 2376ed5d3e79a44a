//! The C resolvers as a pod sees them: a network namespace whose resolv.conf is what kubelet
//! writes for `dnsPolicy: ClusterFirst` (search list + `ndots:5`), the server on the
//! namespace's 127.0.0.1:53, a tiny upstream on its 127.0.0.1:5300, and glibc's `getent` — or
//! a static client linked with musl 1.2.3 (Debian's `musl-tools`), the resolver of Alpine
//! before 3.18, which never retries over TCP.
//!
//! Needs root (`ip netns`); fails saying so otherwise. Nothing leaves the namespace.

mod common;

use std::fs::File;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{Upstream, cluster, settings, start_with};
use nix::sched::{CloneFlags, setns};
use tideway_dns::server::Sockets;

/// A network namespace with `lo` up and its own resolv.conf, removed on drop.
struct Netns {
    name: String,
    etc: PathBuf,
}

impl Netns {
    fn create(tag: &str, resolv_conf: &str) -> Option<Netns> {
        let name = format!("tw-dns{tag}-{}", std::process::id());
        let ok = |args: &[&str]| Command::new("ip").args(args).status().is_ok_and(|s| s.success());
        if !ok(&["netns", "add", &name]) {
            return None;
        }
        let etc = PathBuf::from("/etc/netns").join(&name);
        let ns = Netns { name, etc };
        assert!(ok(&["-n", &ns.name, "link", "set", "lo", "up"]), "lo up");
        std::fs::create_dir_all(&ns.etc).unwrap();
        // `ip netns exec` bind-mounts this file over /etc/resolv.conf.
        std::fs::write(ns.etc.join("resolv.conf"), resolv_conf).unwrap();
        Some(ns)
    }

    /// A runtime whose threads all live in the namespace: sockets the server opens later
    /// (the forwarder's) are created there too.
    fn runtime(&self) -> tokio::runtime::Runtime {
        let path = format!("/run/netns/{}", self.name);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || {
                let fd = File::open(&path).expect("netns handle");
                setns(&fd, CloneFlags::CLONE_NEWNET).expect("setns");
            })
            .build()
            .unwrap()
    }

    /// Runs `f` on a thread that entered the namespace (sockets it opens live there).
    fn enter<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let fd = File::open(&path).expect("netns handle");
            setns(&fd, CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .expect("netns thread")
    }

    /// `python3 -c script arg` in the namespace, bounded by `timeout`: its output, trimmed.
    fn python(&self, script: &str, arg: &str) -> String {
        let out = Command::new("timeout")
            .args(["20", "ip", "netns", "exec", &self.name, "python3", "-c", script, arg])
            .output()
            .expect("python3 runs");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `ip netns exec <ns> getent <args>`, bounded by `timeout`.
    fn getent(&self, args: &[&str]) -> String {
        let out = Command::new("timeout")
            .args(["20", "ip", "netns", "exec", &self.name, "getent"])
            .args(args)
            .output()
            .expect("getent runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            eprintln!("getent {args:?}: {stderr}({})", out.status);
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

/// glibc's `res_query(name, C_IN, T_SRV)` (no EDNS: 512-byte UDP, TCP on TC): the answer
/// count and TC of the message it returns, as `answers=N tc=0|1`.
const RES_QUERY: &str = "import ctypes,sys\n\
lib=ctypes.CDLL('libresolv.so.2')\n\
q=getattr(lib,'res_query',None) or getattr(lib,'__res_query')\n\
buf=ctypes.create_string_buffer(65536)\n\
n=q(sys.argv[1].encode(),1,33,buf,65536)\n\
b=buf.raw\n\
print('answers=%d tc=%d'%((b[6]<<8|b[7]) if n>0 else -1,(b[2]>>1)&1))\n";

/// `getaddrinfo(name)`'s error by its glibc name (`EAI_NODATA`, `EAI_NONAME`, ...), or `found`.
const GETADDRINFO: &str = "import socket,sys\n\
names={getattr(socket,n):n for n in dir(socket) if n.startswith('EAI_')}\n\
try:\n  socket.getaddrinfo(sys.argv[1],80,socket.AF_INET); print('found')\n\
except socket.gaierror as e:\n  print(names.get(e.errno,e.errno))\n";

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[test]
fn glibc_resolver_with_search_path_and_ndots() {
    assert!(
        is_root(),
        "the glibc resolver test needs root (a network namespace); run the tests as root, or leave \
         every privileged test out explicitly with `TIDEWAY_SKIP_PRIVILEGED=1 make unit`"
    );
    let resolv = "nameserver 127.0.0.1\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local\n\
                  options ndots:5 timeout:2 attempts:2\n";
    let ns = Netns::create("", resolv).expect("ip netns add (iproute2 installed, root)");
    let (sockets, up_udp, up_tcp) = ns.enter(|| {
        let sockets = Sockets::bind("127.0.0.1:53".parse().unwrap(), 2).expect("bind :53 in the namespace");
        let up_udp = UdpSocket::bind("127.0.0.1:5300").unwrap();
        let up_tcp = TcpListener::bind("127.0.0.1:5300").unwrap();
        (sockets, up_udp, up_tcp)
    });
    let rt = ns.runtime();
    let upstream = Upstream::start_with(&rt, up_udp, up_tcp);
    let server = start_with(&rt, cluster(), settings(&[upstream.addr]), sockets);

    // `web` is found on the first search domain.
    let out = ns.getent(&["hosts", "web"]);
    assert!(out.starts_with("10.96.0.10") && out.contains("web.ns1.svc.cluster.local"), "{out:?}");
    // `web.ns1` costs one NXDOMAIN (web.ns1.ns1.svc...) then matches on svc.cluster.local.
    let out = ns.getent(&["hosts", "web.ns1"]);
    assert!(out.starts_with("10.96.0.10") && out.contains("web.ns1.svc.cluster.local"), "{out:?}");
    // getaddrinfo on a headless Service: every ready endpoint, not the terminating one.
    let out = ns.getent(&["ahosts", "hl"]);
    assert!(out.contains("10.244.1.5") && out.contains("10.244.2.5"), "{out:?}");
    assert!(!out.contains("10.244.2.6"), "terminating endpoint published: {out:?}");
    // An external name: three NXDOMAINs from the search list, then forwarded upstream.
    let before = upstream.count();
    let out = ns.getent(&["hosts", "www.example.test"]);
    assert!(out.starts_with("192.0.2.80"), "{out:?}");
    assert!(upstream.count() > before, "forwarded");
    // An ExternalName Service: CNAME, target chased upstream.
    let out = ns.getent(&["hosts", "ext"]);
    assert!(out.starts_with("192.0.2.10"), "{out:?}");
    // 120 endpoints do not fit 512 bytes: TC, and glibc retries over TCP for all of them.
    let out = ns.getent(&["ahosts", "big.ns1.svc.cluster.local"]);
    let addrs: std::collections::BTreeSet<&str> =
        out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(addrs.len(), 120, "{out:?}");
    // SRV rows that fit 512 bytes only without their targets' addresses reach glibc whole.
    assert_eq!(ns.python(RES_QUERY, "_http._tcp.mid.ns1.svc.cluster.local"), "answers=6 tc=0");
    // getaddrinfo tells an empty namespace (NODATA: EAI_NODATA) from a missing one
    // (NXDOMAIN: EAI_NONAME).
    assert_eq!(ns.python(GETADDRINFO, "quiet.svc.cluster.local."), "EAI_NODATA");
    assert_eq!(ns.python(GETADDRINFO, "missing.svc.cluster.local."), "EAI_NONAME");
    // A name that exists nowhere fails cleanly (exit status 2, no output).
    let out = ns.getent(&["hosts", "nosuch"]);
    assert!(out.is_empty(), "{out:?}");

    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), server.shutdown()).await.expect("shutdown")
    });
}

/// A getaddrinfo client (IPv4), printing one address a line or `error N`.
const MUSL_CLIENT: &str = r#"
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    struct addrinfo hints, *res, *p;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(argv[1], NULL, &hints, &res);
    if (rc) { printf("error %d\n", rc); return 1; }
    for (p = res; p; p = p->ai_next) {
        char buf[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &((struct sockaddr_in *)p->ai_addr)->sin_addr, buf, sizeof buf);
        printf("%s\n", buf);
    }
    return 0;
}
"#;

/// The musl client, built statically with `musl-gcc` into a temporary directory.
fn musl_client(dir: &std::path::Path) -> PathBuf {
    let src = dir.join("client.c");
    let bin = dir.join("musl-getaddrinfo");
    std::fs::write(&src, MUSL_CLIENT).unwrap();
    let built = Command::new("musl-gcc").args(["-static", "-O1", "-o"]).arg(&bin).arg(&src).status();
    assert!(
        built.is_ok_and(|s| s.success()),
        "the musl resolver test needs musl-gcc (Debian's musl-tools; `make deps` installs it)"
    );
    bin
}

#[test]
fn musl_resolver_gets_the_records_that_fit_a_truncated_answer() {
    assert!(is_root(), "the musl resolver test needs root (a network namespace); see the glibc test");
    let dir = std::env::temp_dir().join(format!("tw-musl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let client = musl_client(&dir);
    let resolv = "nameserver 127.0.0.1\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local\n\
                  options ndots:5 timeout:2 attempts:2\n";
    let ns = Netns::create("m", resolv).expect("ip netns add (iproute2 installed, root)");
    let sockets = ns.enter(|| Sockets::bind("127.0.0.1:53".parse().unwrap(), 1).expect("bind :53"));
    let rt = ns.runtime();
    // With `--endpoint-pod-names`, and a StatefulSet-like headless Service whose endpoints
    // name their pods.
    let shared = cluster();
    shared.update(|s| {
        use tideway_core::net::Protocol::Tcp;
        use tideway_core::testing::{mk_service, mk_slice};
        s.apply_service(mk_service("ns1", "db").headless().port("pg", Tcp, 5432).build());
        let slice = mk_slice("ns1", "db").port("pg", Tcp, 5432).ready("10.244.3.5", "node-a").pod("db-0");
        s.apply_endpoint_slice(slice.build());
    });
    let mut with_pod_names = settings(&[]);
    with_pod_names.index.endpoint_pod_names = true;
    let server = start_with(&rt, shared, with_pod_names, sockets);
    let resolve = |name: &str| {
        let out = Command::new("timeout")
            .args(["20", "ip", "netns", "exec", &ns.name])
            .arg(&client)
            .arg(name)
            .output()
            .expect("the musl client runs");
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect::<Vec<_>>()
    };
    // Through the search path, as a pod on Alpine asks.
    assert_eq!(resolve("web"), ["10.96.0.10"]);
    // 120 endpoints do not fit 512 bytes and musl 1.2.3 ignores TC: it resolves with the
    // whole records that fit (an empty truncated answer would leave it nothing).
    let big = resolve("big");
    assert!(big.len() >= 20 && big.len() < 120, "{big:?}");
    assert!(big.iter().all(|a| a.starts_with("10.244.9.")), "{big:?}");
    // An endpoint named after its pod, through the search path, as a pod on Alpine asks.
    assert_eq!(resolve("db-0.db"), ["10.244.3.5"]);
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), server.shutdown()).await.expect("shutdown")
    });
    let _ = std::fs::remove_dir_all(&dir);
}
