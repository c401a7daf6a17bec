//! The objects the simulator writes for a scenario's grants (ResourceClaims with
//! consumed capacity and the node's ResourceSlice, HAMi's and KAI's pod annotations), read
//! by the agent's reader, give each pod the share the simulator allocates it — a quarter of
//! an H100 under each mechanism.

use agent::grants::{ClaimDevice, Grants};
use simulator::{Fleet, Scenario};

const SCENARIO: &str = r#"
name = "granted"
cluster = "lab"
seed = 7
[[nodes]]
name = "h100-a"
model = "H100-80GB"
gpus = 2
[[tenants]]
name = "dra-1"
kind = "pod"
namespace = "api"
node = "h100-a"
devices = ["0"]
pattern = "steady_training"
grant = { mechanism = "dra_consumable_capacity", memory_gib = 20 }
[[tenants]]
name = "dra-2"
kind = "pod"
namespace = "web"
node = "h100-a"
devices = ["0"]
pattern = "steady_training"
grant = { mechanism = "dra_consumable_capacity", memory_gib = 20 }
[[tenants]]
name = "hami-1"
kind = "pod"
namespace = "ml"
node = "h100-a"
devices = ["1"]
pattern = "steady_training"
grant = { mechanism = "hami", memory_gib = 10, cores = 25 }
[[tenants]]
name = "kai-1"
kind = "pod"
namespace = "ml"
node = "h100-a"
devices = ["1"]
pattern = "steady_training"
grant = { mechanism = "kai_fractions", fraction = 0.25 }
[[tenants]]
name = "kai-2"
kind = "pod"
namespace = "ml"
node = "h100-a"
devices = ["1"]
pattern = "steady_training"
grant = { mechanism = "kai_fractions", memory_gib = 20 }
"#;

#[test]
fn the_simulators_grant_objects_read_back_as_the_shares_it_allocates() {
    let fleet = Fleet::new(Scenario::from_toml(SCENARIO).unwrap());
    let ts = 1_795_219_200_000;
    let (snap, tenants) = fleet.snapshot(0, ts);
    let o = simulator::grant_objects::objects(&fleet, 0, ts);
    assert_eq!((o.pods.len(), o.claims.len(), o.slices.len()), (5, 2, 1));
    let g = Grants::from_objects(Some(&o.node), &o.pods, &o.slices, &o.claims);
    let total = fleet.nodes[0].gpus[0].memory_total_bytes as f64;
    assert_eq!(snap.allocations.len(), 5);
    for a in &snap.allocations {
        let t = tenants.iter().find(|t| t.key == a.tenant).unwrap();
        let (ns, pod, uid, container) = (
            t.namespace.as_deref().unwrap(),
            t.pod.as_deref().unwrap(),
            t.pod_uid.as_deref().unwrap(),
            t.container.as_deref().unwrap(),
        );
        let gpu = fleet.nodes[0]
            .gpus
            .iter()
            .find(|x| x.uuid == a.gpu_uuid)
            .unwrap();
        let read = if pod.starts_with("dra") {
            assert_eq!(
                g.resolve("h100-a", &format!("gpu-{}", gpu.index)),
                Some(gpu.uuid.as_str())
            );
            g.dra_share(&ClaimDevice {
                namespace: ns.into(),
                claim: format!("{pod}-gpu"),
                pool: "h100-a".into(),
                device: format!("gpu-{}", gpu.index),
            })
        } else if pod.starts_with("hami") {
            g.hami_share((ns, pod, container), &gpu.uuid, total)
        } else {
            g.kai_share(uid, total)
        };
        assert_eq!(read, Some(a.share), "{pod}");
        // 20 GiB (10 GiB and 25 % of its compute for HAMi) of an H100's 79.6 GiB, or a 0.25
        // fraction.
        assert!(
            (a.share - 0.25).abs() < 0.002,
            "{pod}: {} is no quarter",
            a.share
        );
    }
}
