//! Leader election over the real Lease.

use super::*;

fn leads(lead: &watch::Receiver<Lead>) -> bool {
    lead.borrow().leads_at(tokio::time::Instant::now())
}

pub(super) async fn election(cluster: &Cluster) {
    let since = SystemTime::now();
    let c = client(Some(&cluster.operator)).await.unwrap();
    let timings = LeaseTimings {
        duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    };
    let campaign = |who: &str| {
        let (tx, rx) = watch::channel(Lead::Follow);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let lease = KubeLease::new(c.clone(), "tideway-system", "tideway-operator");
        let task =
            tokio::spawn(tideway_operator::election::run(lease, Elector::new(who), timings, tx, async {
                let _ = stopped.await;
            }));
        (rx, stop, task)
    };
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/tideway-system/leases/tideway-operator";
    let holder =
        || async { get(&cluster.admin, lease_path).await.map(|l| l["spec"]["holderIdentity"].clone()) };
    let (a_leads, stop_a, task_a) = campaign("op-a");
    eventually("op-a leads", || async { leads(&a_leads).then_some(()) }).await;
    let (b_leads, _stop_b, task_b) = campaign("op-b");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(leads(&a_leads) && !leads(&b_leads), "a live Lease keeps its holder; op-a renews it");
    assert_eq!(holder().await, Some(json!("op-a")));
    let renewals = audited(cluster, OPERATOR, since).iter().filter(|r| r.starts_with("update ")).count();
    assert!(renewals >= 10, "renewed every retry period: {renewals}");

    // op-a shuts down: it releases the Lease and op-b takes it at once.
    let _ = stop_a.send(());
    task_a.await.unwrap();
    assert!(!leads(&a_leads));
    let released = Instant::now();
    eventually("op-b leads", || async { leads(&b_leads).then_some(()) }).await;
    assert!(released.elapsed() < Duration::from_secs(1), "no wait for expiry after a release");
    let lease = get(&cluster.admin, lease_path).await.unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "op-b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "one change of holder");

    // op-b dies without releasing: op-c waits for the Lease to expire on its own clock.
    task_b.abort();
    let died = Instant::now();
    let (c_leads, _stop_c, task_c) = campaign("op-c");
    eventually("op-c leads", || async { leads(&c_leads).then_some(()) }).await;
    let took = died.elapsed();
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(5), "took over after {took:?}");
    assert_eq!(holder().await, Some(json!("op-c")));
    task_c.abort();
}
