//! The NCCL group on a GPU machine: exact results of every collective on CUDA tensors, all-reduce bus
//! bandwidth from 1 MiB to 1 GiB, and a rank killed mid-run. Built with the crate's `cuda` feature
//! (`scripts/gpu/build.sh` puts it at `.device/nccl-bench`) and started as one process per GPU with
//! torchrun's variables (`scripts/gpu/nccl-bench.sh` does that).
//!
//! Usage: `nccl_bench [--gloo] check | bench [MAX_MIB] | kill [TIMEOUT_S]`
//!
//! `--gloo` runs the same program on a Gloo group of CPU processes, so that the program itself can
//! be tried on a machine without GPUs (and without the cuda feature, where NCCL is refused).
//!
//! - `check`: every collective on small tensors of known integers, compared exactly (the sums of small
//!   integers are exact in any order of addition, bf16 included); a CPU tensor refused before any
//!   collective. Each rank prints `nccl check passed rank R`.
//! - `bench`: `all_reduce_sum` of one f32 tensor of 1 MiB, 2 MiB, ... up to `MAX_MIB` (1024), each
//!   size checked exactly once and then timed over several calls. Rank 0 prints one JSON line a size
//!   with the slowest rank's mean time, the algorithm bandwidth (bytes / time) and the bus bandwidth
//!   (algbw * 2(n-1)/n, as nccl-tests defines it for all-reduce: what each link carries, comparable
//!   with the interconnect's own figure). Each call returns only once its work is done (the crate's
//!   collectives are synchronous), so the time includes the wait that a training step would see; small
//!   sizes fall short of nccl-tests' figures, which launch many collectives back to back.
//! - `kill`: a group with a `TIMEOUT_S` (10) timeout; one all-reduce that every rank completes; then
//!   the last rank kills itself (SIGKILL) and the others' next all-reduce must fail within the
//!   timeout plus a margin, and the call after it must be refused. Each surviving rank prints
//!   `nccl kill passed rank R` with the error and how long it took.
//!
//! A failed check panics (exit status 101).

use std::time::{Duration, Instant};

use groundrl_dist::{Backend, DistError, GroupOptions, ProcessGroup};
use tch::{Device, Kind, Tensor};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let backend = if args.first().is_some_and(|a| a == "--gloo") {
        args.remove(0);
        Backend::Gloo
    } else {
        Backend::Nccl
    };
    let mode = args.first().map_or("check", String::as_str);
    let number = |default: u64| {
        args.get(1)
            .map_or(default, |a| a.parse().expect("a whole number after the mode"))
    };
    match mode {
        "check" => check(backend),
        "bench" => bench(backend, number(1024)),
        "kill" => kill(backend, Duration::from_secs(number(10))),
        other => panic!("unknown mode {other:?}: check, bench [MAX_MIB] or kill [TIMEOUT_S]"),
    }
}

fn join(backend: Backend, timeout: Duration, bucket_bytes: usize) -> ProcessGroup {
    let options = GroupOptions {
        timeout,
        bucket_bytes,
        backend,
    };
    let started = Instant::now();
    let group = ProcessGroup::from_env(options).expect("joining the group");
    if group.rank() == 0 {
        let nccl = match backend {
            Backend::Nccl => groundrl_dist::nccl_version().expect("NCCL's version"),
            Backend::Gloo => "-".to_owned(),
        };
        println!(
            "{{\"backend\": \"{backend:?}\", \"world_size\": {}, \"nccl_runtime\": \"{nccl}\", \
             \"device\": \"{:?}\", \"join_s\": {:.3}}}",
            group.world_size(),
            group.device(),
            started.elapsed().as_secs_f64()
        );
    }
    group
}

/// `[1, 2, ..., n] * factor` of `kind` on `device`.
fn ramp(n: i64, factor: usize, kind: Kind, device: Device) -> Tensor {
    ((Tensor::arange(n, (Kind::Int64, device)) + 1) * factor as i64).to_kind(kind)
}

fn assert_equal(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.size(), want.size(), "{what}: shape");
    assert_eq!(got.kind(), want.kind(), "{what}: dtype");
    let differ = got
        .to_kind(Kind::Double)
        .ne_tensor(&want.to_kind(Kind::Double))
        .any()
        .int64_value(&[]);
    assert_eq!(differ, 0, "{what}: got {got:?} want {want:?}");
}

fn check(backend: Backend) {
    let mut group = join(backend, Duration::from_secs(120), 64);
    let (rank, n, device) = (group.rank(), group.world_size(), group.device());
    // The sum over ranks of (rank + 1): n(n+1)/2.
    let total = n * (n + 1) / 2;

    // Buckets of 64 bytes: two f32 tensors sharing one, bf16, f64 and i64 tensors, an f32 tensor
    // larger than a bucket, a transposed one and a scalar; shapes and dtypes kept.
    // The same tensors with `[1, 2, ...]` times `factor`: (rank + 1) before, the total after.
    let make = |factor: usize| -> Vec<Tensor> {
        let mut tensors: Vec<Tensor> = [
            (vec![3], Kind::Float),
            (vec![2, 2], Kind::Float),
            (vec![5], Kind::BFloat16),
            (vec![4], Kind::Double),
            (vec![3], Kind::Int64),
            (vec![40], Kind::Float),
            (vec![], Kind::Float),
        ]
        .into_iter()
        .map(|(shape, kind): (Vec<i64>, Kind)| {
            let numel: i64 = shape.iter().product();
            ramp(numel, factor, kind, device).reshape(shape.as_slice())
        })
        .collect();
        tensors.push(ramp(6, factor, Kind::Float, device).reshape([2, 3]).tr());
        tensors
    };
    let mut tensors = make(rank + 1);
    let wants = make(total);
    group.all_reduce_sum(&mut tensors).expect("all_reduce_sum");
    for (i, (got, want)) in tensors.iter().zip(&wants).enumerate() {
        assert_equal(got, want, &format!("all_reduce_sum tensor {i}"));
    }

    // Broadcast from the last rank, into a strided tensor too.
    let root = n - 1;
    let mut t = ramp(8, rank + 1, Kind::Float, device);
    group.broadcast(&mut t, root).expect("broadcast");
    assert_equal(&t, &ramp(8, root + 1, Kind::Float, device), "broadcast");
    let mut strided = ramp(6, rank + 1, Kind::Float, device).reshape([2, 3]).tr();
    group
        .broadcast(&mut strided, root)
        .expect("broadcast of a strided tensor");
    assert_equal(
        &strided,
        &ramp(6, root + 1, Kind::Float, device).reshape([2, 3]).tr(),
        "strided broadcast",
    );

    // All-gather of tensors and of byte strings of different lengths.
    let gathered = group
        .all_gather(&ramp(5, rank + 1, Kind::Int64, device))
        .expect("all_gather");
    assert_eq!(gathered.len(), n);
    for (r, got) in gathered.iter().enumerate() {
        assert_equal(
            got,
            &ramp(5, r + 1, Kind::Int64, device),
            &format!("all_gather from rank {r}"),
        );
    }
    let mine = vec![b'a' + rank as u8; rank + 1];
    let bytes = group.all_gather_bytes(&mine).expect("all_gather_bytes");
    for (r, got) in bytes.iter().enumerate() {
        assert_eq!(
            got,
            &vec![b'a' + r as u8; r + 1],
            "all_gather_bytes from rank {r}"
        );
    }

    // NCCL: a CPU tensor is refused before any collective, and the group stays usable.
    if backend == Backend::Nccl {
        let err = group
            .all_reduce_sum(&mut [Tensor::ones([2], (Kind::Float, Device::Cpu))])
            .unwrap_err();
        assert!(matches!(err, DistError::WrongDevice { .. }), "{err}");
    }
    group.barrier().expect("barrier");
    println!("nccl check passed rank {rank}");
}

fn bench(backend: Backend, max_mib: u64) {
    // Buckets as large as the largest tensor: every size is one collective, in place.
    let mut group = join(backend, Duration::from_secs(300), (max_mib as usize) << 20);
    let (rank, n, device) = (group.rank(), group.world_size(), group.device());
    let mut mib = 1u64;
    while mib <= max_mib {
        let bytes = mib << 20;
        let numel = (bytes / 4) as i64;
        let mut tensor = [Tensor::full([numel], rank as f64 + 1.0, (Kind::Float, device))];
        group.all_reduce_sum(&mut tensor).expect("all_reduce_sum");
        let want = (n * (n + 1) / 2) as f64;
        let wrong = tensor[0].ne(want).sum(Kind::Int64).int64_value(&[]);
        assert_eq!(wrong, 0, "{mib} MiB: {wrong} elements differ from {want}");
        // Further calls sum growing values (powers of n): the time does not depend on them.
        let iters = (8192 / mib).clamp(10, 200);
        for _ in 0..3 {
            group.all_reduce_sum(&mut tensor).expect("warm-up all_reduce_sum");
        }
        group.barrier().expect("barrier");
        let started = Instant::now();
        for _ in 0..iters {
            group.all_reduce_sum(&mut tensor).expect("all_reduce_sum");
        }
        let mean_s = started.elapsed().as_secs_f64() / iters as f64;
        let times = group
            .all_gather(&Tensor::from_slice(&[mean_s]).to_device(device))
            .expect("gathering the times");
        let slowest = times.iter().map(|t| t.double_value(&[0])).fold(0.0f64, f64::max);
        if rank == 0 {
            let algbw = bytes as f64 / slowest / 1e9;
            let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
            println!(
                "{{\"op\": \"all_reduce\", \"bytes\": {bytes}, \"dtype\": \"f32\", \"ranks\": {n}, \
                 \"iters\": {iters}, \"time_us\": {:.1}, \"algbw_gbs\": {algbw:.2}, \"busbw_gbs\": {busbw:.2}}}",
                slowest * 1e6
            );
        }
        mib *= 2;
    }
    group.barrier().expect("barrier");
}

fn kill(backend: Backend, timeout: Duration) {
    let mut group = join(backend, timeout, 25 << 20);
    let (rank, n, device) = (group.rank(), group.world_size(), group.device());
    assert!(n >= 2, "the kill test needs two ranks or more");
    let mut tensor = [Tensor::ones([1 << 20], (Kind::Float, device))];
    group
        .all_reduce_sum(&mut tensor)
        .expect("the all-reduce before the kill");
    group.barrier().expect("barrier");
    if rank == n - 1 {
        println!("rank {rank}: killing itself (SIGKILL)");
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
        std::thread::sleep(Duration::from_secs(60));
        panic!("rank {rank} outlived its SIGKILL");
    }
    // Let the killed rank go first.
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let err = group
        .all_reduce_sum(&mut tensor)
        .expect_err("an all-reduce with a dead rank must fail");
    let took = started.elapsed();
    let margin = Duration::from_secs(5);
    assert!(
        took <= timeout + margin,
        "the error came after {took:?}, more than the {timeout:?} timeout and a {margin:?} margin: {err}"
    );
    assert!(matches!(err, DistError::C10d { .. }), "{err}");
    let refused = group.barrier().unwrap_err();
    assert!(matches!(refused, DistError::Failed(_)), "{refused}");
    println!(
        "nccl kill passed rank {rank}: error after {:.1} s (timeout {} s): {err}",
        took.as_secs_f64(),
        timeout.as_secs()
    );
    // How long c10d takes to tear the failed group down (its watchdog pauses for its flight-recorder
    // dump after a failure).
    let started = Instant::now();
    drop(group);
    println!(
        "rank {rank}: the failed group was dropped in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
