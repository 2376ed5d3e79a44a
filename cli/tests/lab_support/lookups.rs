//! Lookup loops in a lab pod: `getaddrinfo` for both families (A and AAAA asked at once from
//! one socket, as glibc and musl do), built against glibc and, statically, musl; each loop
//! prints its failed and slow lookups and a summary line.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{BIN, TestLab};

/// `lookups NAME SECONDS INTERVAL_MS [STOP_FILE]`: `getaddrinfo(NAME)` for both families (A and
/// AAAA asked at once from one socket, as glibc and musl do) in a loop, for SECONDS or until
/// STOP_FILE exists; prints each failed lookup and each one that took 1 s or more (it waited
/// out a timeout), then a summary line.
const LOOKUPS: &str = r#"
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
int main(int argc, char **argv) {
    double start = now(), max_ms = 0;
    long n = 0, failed = 0, slow = 0;
    const char *stop = argc > 4 ? argv[4] : NULL;
    while (now() - start < atof(argv[2]) * 1e3 && !(stop && access(stop, F_OK) == 0)) {
        struct addrinfo hints, *res;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        double t0 = now();
        int rc = getaddrinfo(argv[1], NULL, &hints, &res);
        double ms = now() - t0;
        n++;
        if (ms > max_ms) max_ms = ms;
        if (rc) { failed++; printf("failed at %.0f ms: %s\n", t0 - start, gai_strerror(rc)); }
        else freeaddrinfo(res);
        if (ms >= 1000) { slow++; printf("slow at %.0f ms: %.0f ms\n", t0 - start, ms); }
        fflush(stdout);
        usleep(atoi(argv[3]) * 1000);
    }
    printf("lookups %ld failed %ld slow %ld max_ms %.1f\n", n, failed, slow, max_ms);
    return 0;
}
"#;

/// The lookup loop built against glibc (`cc`) and, statically, against musl (`musl-gcc`).
pub(crate) fn clients() -> &'static [(&'static str, PathBuf); 2] {
    static BUILT: OnceLock<[(&'static str, PathBuf); 2]> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tw-lookups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("lookups.c");
        std::fs::write(&src, LOOKUPS).unwrap();
        let build = |compiler: &str, extra: &[&str], out: &str| {
            let bin = dir.join(out);
            let built = Command::new(compiler).args(extra).args(["-O1", "-o"]).arg(&bin).arg(&src).status();
            assert!(built.is_ok_and(|s| s.success()), "{compiler} (Debian's gcc, musl-tools; `make deps`)");
            bin
        };
        [
            ("glibc", build("cc", &[], "lookups-glibc")),
            ("musl", build("musl-gcc", &["-static"], "lookups-musl")),
        ]
    })
}

/// Starts `client` in pod `pod` for `seconds`, or until `stop` exists.
pub(crate) fn lookups(
    lab: &TestLab,
    pod: &str,
    client: &Path,
    name: &str,
    seconds: u32,
    stop: &Path,
) -> Child {
    let (client, seconds) = (client.display().to_string(), seconds.to_string());
    let stop = stop.display().to_string();
    Command::new(BIN)
        .args(["lab", "exec", "--name", &lab.name, pod, "--", &client, name, &seconds, "20", &stop])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lab exec runs")
}

/// What a lookup loop printed, once it ended.
pub(crate) fn report(which: &str, child: Child) -> String {
    let out = child.wait_with_output().expect("the lookup loop ends");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{which}: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// Runs the glibc and musl lookup loops of `name` in `pod` for `seconds` while `during` runs;
/// returns each one's lines (slow and failed lookups, then the summary).
pub(crate) fn lookups_during(
    lab: &TestLab,
    pod: &str,
    name: &str,
    seconds: u32,
    during: impl FnOnce(),
) -> Vec<(&'static str, String)> {
    loops(lab, pod, name, seconds, during, None)
}

/// As [`lookups_during`], but the loops end `tail` after `during` returns (at the latest after
/// `seconds`, which `during` must not outlast).
pub(crate) fn lookups_while(
    lab: &TestLab,
    pod: &str,
    name: &str,
    (seconds, tail): (u32, Duration),
    during: impl FnOnce(),
) -> Vec<(&'static str, String)> {
    loops(lab, pod, name, seconds, during, Some(tail))
}

fn loops(
    lab: &TestLab,
    pod: &str,
    name: &str,
    seconds: u32,
    during: impl FnOnce(),
    tail: Option<Duration>,
) -> Vec<(&'static str, String)> {
    static STOPS: AtomicUsize = AtomicUsize::new(0);
    let n = STOPS.fetch_add(1, Ordering::Relaxed);
    let stop = std::env::temp_dir().join(format!("tw-lookups-stop-{}-{n}", std::process::id()));
    let _ = std::fs::remove_file(&stop);
    let started = Instant::now();
    let loops: Vec<(&str, Child)> =
        clients().iter().map(|(which, bin)| (*which, lookups(lab, pod, bin, name, seconds, &stop))).collect();
    during();
    if let Some(tail) = tail {
        let took = started.elapsed();
        assert!(
            took + tail < Duration::from_secs(seconds.into()),
            "it took {took:?}, the loops ran {seconds} s"
        );
        std::thread::sleep(tail);
        std::fs::write(&stop, b"").expect("the loops' stop file");
    }
    let reports: Vec<(&str, String)> =
        loops.into_iter().map(|(which, child)| (which, report(which, child))).collect();
    let _ = std::fs::remove_file(&stop);
    for (which, text) in &reports {
        assert!(count(text, "lookups") >= 100, "{which}: too few lookups\n{text}");
    }
    reports
}

/// A number of a loop's summary line (`lookups N failed F slow S ...`).
pub(crate) fn count(text: &str, key: &str) -> u64 {
    let words: Vec<&str> = text.lines().last().unwrap_or_default().split_whitespace().collect();
    words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)?.parse().ok()).unwrap_or(u64::MAX)
}
