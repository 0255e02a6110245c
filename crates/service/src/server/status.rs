//! The report `gvault serve status` prints: clients, queues, batch sizes,
//! bytes per op, and where the backend ran the jobs (GPU use).

use std::sync::atomic::Ordering;

use gvault_accel::OpKind;
use serde_json::{json, Value};

use super::Shared;

impl Shared {
    pub(crate) fn status_json(&self) -> String {
        let clients: Vec<Value> = {
            let map = self.clients.lock().unwrap_or_else(|p| p.into_inner());
            let mut v: Vec<_> = map.values().cloned().collect();
            v.sort_by_key(|c| c.id);
            v.iter()
                .map(|c| {
                    let (buffers, memory, keys) = c.holdings();
                    json!({
                        "id": c.id,
                        "pid": c.peer.pid,
                        "uid": c.peer.uid,
                        "requests": c.requests.load(Ordering::Relaxed),
                        "bytes": c.bytes.load(Ordering::Relaxed),
                        "in_flight": c.in_flight(),
                        "buffers": buffers,
                        "buffer_bytes": memory,
                        "keys": keys,
                    })
                })
                .collect()
        };
        let queued = self.sched.queued();
        let ops: Vec<Value> = OpKind::ALL
            .iter()
            .enumerate()
            .filter_map(|(i, op)| {
                let s = &self.sched.stats[i];
                let jobs = s.jobs.load(Ordering::Relaxed);
                let waiting = queued.get(i).map_or(0, |q| q.1);
                if jobs == 0 && waiting == 0 {
                    return None;
                }
                let requests = s.requests.load(Ordering::Relaxed);
                Some(json!({
                    "op": op.name(),
                    "queued": waiting,
                    "requests": requests,
                    "jobs": jobs,
                    "segments": s.segments.load(Ordering::Relaxed),
                    "bytes": s.bytes.load(Ordering::Relaxed),
                    "mean_batch": if jobs == 0 { 0.0 } else { requests as f64 / jobs as f64 },
                    "largest_batch": s.largest_batch.load(Ordering::Relaxed),
                    "busy_s": s.busy_ns.load(Ordering::Relaxed) as f64 / 1e9,
                }))
            })
            .collect();
        let backend = match &self.auto {
            Some(a) => {
                let p = a.placements();
                let ((cpu_ns, cpu_bytes), (gpu_ns, gpu_bytes)) = a.queued();
                json!({
                    "name": "auto",
                    "cpu_threads": a.cpu_threads(),
                    "gpu": a.has_gpu(),
                    "gpu_started": a.gpu_started(),
                    "jobs": {
                        "cpu": p.cpu_jobs,
                        "gpu": p.gpu_jobs,
                        "split": p.split_jobs,
                        "explored": p.explored_jobs,
                    },
                    "learned": a.learned().iter().map(|f| json!({
                        "op": f.op.name(),
                        "side": f.side,
                        "memory": f.memory,
                        "split_part": f.split_part,
                        "segment_bytes_from": f.segment_bytes_from,
                        "segments_from": f.segments_from,
                        "factor": f.factor,
                        "observations": f.observations,
                    })).collect::<Vec<_>>(),
                    "bytes": { "cpu": p.cpu_bytes, "gpu": p.gpu_bytes },
                    "queued_ns": { "cpu": cpu_ns, "gpu": gpu_ns },
                    "queued_bytes": { "cpu": cpu_bytes, "gpu": gpu_bytes },
                })
            }
            None => json!({ "name": self.backend.name() }),
        };
        let c = &self.config;
        json!({
            "version": crate::protocol::VERSION,
            "pid": std::process::id(),
            "socket": c.socket.display().to_string(),
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "closing": self.closing.load(Ordering::Relaxed),
            "accepted": self.accepted.load(Ordering::Relaxed),
            "refused": self.refused.load(Ordering::Relaxed),
            "gpu_registered_buffers": self.registered.load(Ordering::Relaxed),
            "config": {
                "workers": c.workers,
                "batching": c.batch.enabled,
                "batch_small_bytes": c.batch.small_bytes,
                "batch_max_bytes": c.batch.max_bytes,
                "batch_max_requests": c.batch.max_requests,
                "client_memory": c.limits.client_memory,
                "client_queue": c.limits.client_queue,
                "max_clients": c.max_clients,
            },
            "clients": clients,
            "ops": ops,
            "backend": backend,
        })
        .to_string()
    }
}
