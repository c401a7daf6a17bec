//! What the demand poll counts: the work it saw waiting, what it refused or left out.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// `nvidia.com/gpu`, `nvidia.com/gpu.shared`, `nvidia.com/mig-<profile>`.
    pub resource: String,
}

model::metric_set! {
    pub struct DemandMetrics {
        pods: Gauge => "waiting_pods",
            "Pending pods asking for GPUs at the last demand poll";
        workloads: Gauge => "waiting_workloads",
            "Kueue Workloads not admitted that ask for GPUs, at the last demand poll";
        slurm_jobs: Gauge => "waiting_slurm_jobs",
            "Slurm jobs pending with a GPU request at the last demand poll (held ones left out)";
        held_jobs: Gauge => "held_slurm_jobs",
            "Slurm jobs pending with a GPU request but held (JobHeldUser, JobHeldAdmin) at the last demand poll";
        units: Family<ResourceLabels, Gauge> => "waiting_gpu_units",
            "Units of each GPU resource pending pods and unadmitted Kueue Workloads asked for at the last demand poll";
        refused: Counter => "waiting_pods_refused",
            "Pending pods the demand poll refused (a field outside its documented domain)";
        left_out: Counter => "waiting_pods_left_out",
            "Pending pods beyond [demand] max_pods, not read";
    }
}
