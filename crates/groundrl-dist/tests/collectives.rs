//! Multi-process tests of the Gloo group on the CPU. Each test starts 2 or 3 copies of this test
//! binary, each running the ignored `rank` test below with torchrun's variables (a TCPStore on
//! 127.0.0.1 at a port found free by binding port 0) and the scenario in `GROUNDRL_DIST_SCENARIO`.
//! A rank asserts its own results and prints a line naming its scenario when they hold; the test
//! checks every rank's exit status and that line (a rank that ran no test would exit 0 too).
//!
//! The values summed are small integers, so the f32 sums are exact whatever order Gloo adds them
//! in (every partial sum is an integer below 2^24), and the tests compare with exact equality.

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use groundrl_dist::{DistError, GroupOptions, ProcessGroup};
use tch::{Kind, Tensor};

const SCENARIO: &str = "GROUNDRL_DIST_SCENARIO";
const PASSED: &str = "groundrl-dist scenario passed:";
/// Ample for a loaded 2-core machine; the fault scenarios set short timeouts of their own.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Small enough that the mixed tensors of `buckets` span several buckets.
const BUCKET_BYTES: usize = 64;

/// A TCP port that was free a moment ago (the OS picks it for a bind to port 0).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding port 0 on the loopback");
    listener.local_addr().expect("bound address").port()
}

/// Runs `scenario` on `world` ranks (children of this process) and returns their outputs, rank
/// order; `unset` names a torchrun variable the children do not get.
fn launch(scenario: &str, world: usize, unset: Option<&str>) -> Vec<Output> {
    let port = free_port().to_string();
    let exe = std::env::current_exe().expect("the test binary's path");
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let mut command = Command::new(&exe);
            command
                .args(["rank", "--exact", "--ignored", "--nocapture"])
                .env(SCENARIO, scenario)
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("LOCAL_WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(name) = unset {
                command.env_remove(name);
            }
            command.spawn().expect("starting a rank")
        })
        .collect();
    children
        .into_iter()
        .map(|child| child.wait_with_output().expect("waiting for a rank"))
        .collect()
}

/// Asserts that rank `rank` exited 0 after passing `scenario`.
fn assert_passed(outputs: &[Output], rank: usize, scenario: &str) {
    let out = &outputs[rank];
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("{PASSED} {scenario} rank {rank}")),
        "rank {rank} of {scenario}: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

#[test]
fn two_ranks_reduce_broadcast_gather_and_meet() {
    let outputs = launch("collectives", 2, None);
    (0..2).for_each(|rank| assert_passed(&outputs, rank, "collectives"));
}

#[test]
fn three_ranks_reduce_broadcast_gather_and_meet() {
    let outputs = launch("collectives", 3, None);
    (0..3).for_each(|rank| assert_passed(&outputs, rank, "collectives"));
}

#[test]
fn two_ranks_sum_gradients_during_the_backward_pass() {
    let outputs = launch("gradient_hooks", 2, None);
    (0..2).for_each(|rank| assert_passed(&outputs, rank, "gradient_hooks"));
}

#[test]
fn three_ranks_sum_gradients_during_the_backward_pass() {
    let outputs = launch("gradient_hooks", 3, None);
    (0..3).for_each(|rank| assert_passed(&outputs, rank, "gradient_hooks"));
}

#[test]
fn a_rank_that_died_makes_the_survivor_fail() {
    let outputs = launch("dead_peer", 2, None);
    assert_passed(&outputs, 0, "dead_peer");
    assert_eq!(outputs[1].status.code(), Some(DEAD_EXIT_CODE));
}

#[test]
fn a_rank_that_never_joins_the_collective_makes_the_other_time_out() {
    let outputs = launch("silent_peer", 2, None);
    (0..2).for_each(|rank| assert_passed(&outputs, rank, "silent_peer"));
}

#[test]
fn from_env_names_the_missing_variable() {
    let outputs = launch("missing_world_size", 1, Some("WORLD_SIZE"));
    assert_passed(&outputs, 0, "missing_world_size");
}

// ---- one rank -------------------------------------------------------------------------------

const DEAD_EXIT_CODE: i32 = 3;

#[test]
#[ignore = "one rank of the multi-process tests above, which start it with GROUNDRL_DIST_SCENARIO"]
fn rank() {
    let scenario = std::env::var(SCENARIO).expect("GROUNDRL_DIST_SCENARIO (set by the tests above)");
    let options = GroupOptions {
        timeout: TIMEOUT,
        bucket_bytes: BUCKET_BYTES,
        ..GroupOptions::default()
    };
    if scenario == "missing_world_size" {
        let err = ProcessGroup::from_env(options).unwrap_err();
        assert!(
            matches!(err, DistError::MissingVar { name: "WORLD_SIZE" }),
            "{err}"
        );
        assert!(err.to_string().contains("WORLD_SIZE is not set"), "{err}");
        println!("{PASSED} {scenario} rank 0");
        return;
    }
    let mut group = ProcessGroup::from_env(options).expect("joining the group");
    match scenario.as_str() {
        "collectives" => {
            all_reduce(&mut group);
            buckets(&mut group);
            broadcast(&mut group);
            bucketed_broadcast(&mut group);
            all_gather(&mut group);
            group.barrier().expect("barrier");
        }
        "gradient_hooks" => {
            accumulation(&mut group);
            reached_by_some(&mut group);
            reached_twice(&mut group);
            views_of_one_buffer(&mut group);
        }
        "dead_peer" => dead_peer(&mut group),
        "silent_peer" => silent_peer(&mut group),
        other => panic!("unknown scenario {other}"),
    }
    println!("{PASSED} {scenario} rank {}", group.rank());
}

/// 1 + 2 + ... + world: the sum of the factors `rank + 1` over the ranks.
fn rank_factor_sum(group: &ProcessGroup) -> i64 {
    let w = group.world_size() as i64;
    w * (w + 1) / 2
}

/// `factor * (1, 2, ..., n)` in `shape` and `kind`.
fn ramp(shape: &[i64], kind: Kind, factor: i64) -> Tensor {
    let n: i64 = shape.iter().product();
    (Tensor::arange(n, (Kind::Int64, tch::Device::Cpu)) + 1)
        .g_mul_scalar(factor)
        .reshape(shape)
        .to_kind(kind)
}

fn all_reduce(group: &mut ProcessGroup) {
    let factor = group.rank() as i64 + 1;
    let mut tensors = [ramp(&[2, 3], Kind::Float, factor)];
    group.all_reduce_sum(&mut tensors).expect("all_reduce_sum");
    assert!(tensors[0].equal(&ramp(&[2, 3], Kind::Float, rank_factor_sum(group))));
}

/// Tensors of several shapes and dtypes across bucket boundaries (64 bytes): two f32 tensors
/// sharing a bucket (12 + 32 bytes), an f64 and an i64 tensor (a dtype change starts a bucket), an
/// f32 tensor larger than a bucket (reduced in place), a transposed (strided) one and a scalar.
fn buckets(group: &mut ProcessGroup) {
    let factor = group.rank() as i64 + 1;
    let shapes: [(&[i64], Kind); 6] = [
        (&[3], Kind::Float),
        (&[2, 4], Kind::Float),
        (&[5], Kind::Double),
        (&[2, 2], Kind::Int64),
        (&[20], Kind::Float),
        (&[], Kind::Float),
    ];
    let mut tensors: Vec<Tensor> = shapes.iter().map(|(s, k)| ramp(s, *k, factor)).collect();
    tensors.insert(5, ramp(&[2, 3], Kind::Float, factor).tr());
    assert!(!tensors[5].is_contiguous());
    group
        .all_reduce_sum(&mut tensors)
        .expect("all_reduce_sum of mixed tensors");
    let total = rank_factor_sum(group);
    let mut expected: Vec<Tensor> = shapes.iter().map(|(s, k)| ramp(s, *k, total)).collect();
    expected.insert(5, ramp(&[2, 3], Kind::Float, total).tr());
    for (i, (got, want)) in tensors.iter().zip(&expected).enumerate() {
        assert_eq!((got.size(), got.kind()), (want.size(), want.kind()), "tensor {i}");
        assert!(got.equal(want), "tensor {i}: {got} != {want}");
    }
}

fn broadcast(group: &mut ProcessGroup) {
    let sent = Tensor::from_slice(&[7.0f32, 8.0, 9.0]);
    let mut tensor = if group.rank() == 1 {
        sent.copy()
    } else {
        Tensor::zeros([3], (Kind::Float, tch::Device::Cpu))
    };
    let world_size = group.world_size();
    let err = group.broadcast(&mut tensor, world_size).unwrap_err();
    assert!(
        matches!(err, DistError::NoSuchRank { rank, .. } if rank == world_size),
        "{err}"
    );
    group
        .broadcast(&mut tensor, 1)
        .expect("broadcast from rank 1 (a bad root is refused before any collective)");
    assert!(tensor.equal(&sent));
    // A strided tensor goes through a contiguous buffer and comes back in place.
    let sent = ramp(&[2, 3], Kind::Int64, 5).tr();
    let mut strided = if group.rank() == 1 {
        sent.copy()
    } else {
        sent.zeros_like()
    };
    assert!(!strided.is_contiguous());
    group
        .broadcast(&mut strided, 1)
        .expect("broadcast of a strided tensor");
    assert!(strided.equal(&sent));
}

/// The tensors of `buckets` broadcast from the last rank in the 64-byte buckets: every rank ends
/// with the root's values (its factor), shapes, dtypes and the strided tensor's layout kept.
fn bucketed_broadcast(group: &mut ProcessGroup) {
    let root = group.world_size() - 1;
    let shapes: [(&[i64], Kind); 5] = [
        (&[3], Kind::Float),
        (&[2, 4], Kind::Float),
        (&[5], Kind::Double),
        (&[20], Kind::Float),
        (&[], Kind::Int64),
    ];
    let of = |factor: i64| -> Vec<Tensor> {
        let mut tensors: Vec<Tensor> = shapes.iter().map(|(s, k)| ramp(s, *k, factor)).collect();
        tensors.push(ramp(&[2, 3], Kind::Float, factor).tr());
        tensors
    };
    let mut tensors = of(group.rank() as i64 + 1);
    group
        .broadcast_bucketed(&mut tensors, root)
        .expect("bucketed broadcast");
    for (i, (got, want)) in tensors.iter().zip(&of(root as i64 + 1)).enumerate() {
        assert_eq!((got.size(), got.kind()), (want.size(), want.kind()), "tensor {i}");
        assert!(got.equal(want), "tensor {i}: {got} != {want}");
    }
    assert!(!tensors[5].is_contiguous());
}

fn all_gather(group: &mut ProcessGroup) {
    let r = group.rank() as i64;
    let gathered = group
        .all_gather(&Tensor::from_slice(&[r, 10 * r]))
        .expect("all_gather");
    assert_eq!(gathered.len(), group.world_size());
    for (i, t) in gathered.iter().enumerate() {
        let i = i as i64;
        assert_eq!(Vec::<i64>::try_from(t).unwrap(), vec![i, 10 * i]);
    }
    let bytes = |rank: usize| format!("rank {rank}{}", "!".repeat(rank)).into_bytes();
    let gathered = group
        .all_gather_bytes(&bytes(group.rank()))
        .expect("all_gather_bytes");
    assert_eq!(gathered, (0..group.world_size()).map(bytes).collect::<Vec<_>>());
}

/// Parameters of several shapes and dtypes (f32, f64, a scalar; several 64-byte buckets), leaf
/// tensors that require gradients.
fn parameters() -> Vec<Tensor> {
    let shapes: [(&[i64], Kind); 5] = [
        (&[3], Kind::Float),
        (&[2, 4], Kind::Float),
        (&[5], Kind::Double),
        (&[20], Kind::Float),
        (&[], Kind::Float),
    ];
    shapes
        .iter()
        .map(|(s, k)| Tensor::zeros(*s, (*k, tch::Device::Cpu)).set_requires_grad(true))
        .collect()
}

/// One backward pass of `Σ_p sum(p * factor * ramp)`: adds `factor * ramp` to each gradient.
fn backward(params: &[Tensor], factor: i64) {
    let loss = params
        .iter()
        .map(|p| (p * ramp(&p.size(), p.kind(), factor)).sum(Kind::Double))
        .reduce(|a, b| a + b)
        .expect("parameters");
    loss.backward();
}

/// Zeroes the gradients in place, as the trainer's optimizer does after a step.
fn zero_gradients(params: &[Tensor]) {
    for p in params {
        let _ = p.grad().zero_();
    }
}

/// Asserts that each of `params` has the gradient `factor * ramp`.
fn assert_gradients(params: &[Tensor], factor: i64, what: &str) {
    for (i, p) in params.iter().enumerate() {
        let want = ramp(&p.size(), p.kind(), factor);
        assert!(
            p.grad().equal(&want),
            "{what}, parameter {i}: {} != {want}",
            p.grad()
        );
    }
}

/// Three accumulations of 3 micro-batches each, the hooks armed for the last pass only: the sums of
/// every micro-batch of every rank. The first armed pass only learns, and every bucket starts after
/// it; in the others every bucket starts during the pass, and no gradient comes late (a hook that
/// acted in an unarmed pass would have started a bucket that later passes then reached). A
/// collective while armed is refused without harming the group.
fn accumulation(group: &mut ProcessGroup) {
    let params = parameters();
    group.hook_gradients(&params).expect("hooking the gradients");
    assert!(group.hooks_gradients_of(&params));
    assert!(!group.hooks_gradients_of(&params[1..]));
    let factor = group.rank() as i64 + 1;
    for round in 0..3 {
        for micro in 1..=3 {
            if micro == 3 {
                group.arm_gradient_hooks().expect("arming the hooks");
                let refused = group.barrier().unwrap_err();
                assert!(matches!(refused, DistError::GradientHooks(_)), "{refused}");
                assert!(matches!(
                    group.arm_gradient_hooks(),
                    Err(DistError::GradientHooks(_))
                ));
            }
            backward(&params, factor * micro);
        }
        let sum = group.finish_gradient_sum().expect("finishing the gradient sum");
        assert_gradients(&params, rank_factor_sum(group) * 6, "3 micro-batches");
        // 64-byte buckets: at least the f32, f64 and f32 runs.
        assert!(sum.buckets >= 3, "{sum:?}");
        let overlapped = if round == 0 { 0 } else { sum.buckets };
        assert_eq!(
            (sum.overlapped, sum.late),
            (overlapped, 0),
            "round {round}: {sum:?}"
        );
        zero_gradients(&params);
    }
}

/// One parameter every rank reaches, one only rank 0 reaches, one none reaches: the first gets the
/// sum, the second rank 0's gradient on every rank, the third no gradient anywhere.
fn reached_by_some(group: &mut ProcessGroup) {
    let params = parameters();
    let (all, first, none) = (&params[..1], &params[1..2], &params[2..3]);
    group.hook_gradients(&params[..3]).expect("hooking the gradients");
    group.arm_gradient_hooks().expect("arming the hooks");
    backward(all, group.rank() as i64 + 1);
    if group.rank() == 0 {
        backward(first, 7);
    }
    group.finish_gradient_sum().expect("finishing the gradient sum");
    assert_gradients(all, rank_factor_sum(group), "reached by every rank");
    assert_gradients(first, 7, "reached by rank 0 alone");
    assert!(!none[0].grad().defined(), "reached by no rank");
}

/// Parameters reached by two autograd calls of one armed pass, as a tied weight is under gradient
/// checkpointing: the second always, the first from the third pass on. Once learnt, a bucket waits
/// for both calls; in the third pass the first parameter's second gradient comes after its bucket
/// started, and is summed apart and added (exact here: small integers).
fn reached_twice(group: &mut ProcessGroup) {
    let params: Vec<Tensor> = (0..3)
        .map(|_| Tensor::zeros([16], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true))
        .collect();
    // 64 bytes each: one a bucket.
    group.hook_gradients(&params).expect("hooking the gradients");
    let factor = group.rank() as i64 + 1;
    let total = rank_factor_sum(group);
    for (round, (calls, overlapped, late)) in [(1, 0, 0), (1, 3, 0), (2, 3, 1), (2, 3, 0)]
        .into_iter()
        .enumerate()
    {
        group.arm_gradient_hooks().expect("arming the hooks");
        backward(&params[1..], factor);
        backward(&params[2..], factor);
        for _ in 0..calls {
            backward(&params[..1], factor);
        }
        let sum = group.finish_gradient_sum().expect("finishing the gradient sum");
        assert_gradients(&params[..1], calls * total, "the first");
        assert_gradients(&params[1..2], total, "reached once");
        assert_gradients(&params[2..], 2 * total, "reached twice");
        assert_eq!(
            (sum.buckets, sum.overlapped, sum.late),
            (3, overlapped, late),
            "round {round}"
        );
        zero_gradients(&params);
    }
}

/// After a sum, the gradients of one bucket are views of its buffer, side by side: the buckets take
/// no memory beyond the gradients.
fn views_of_one_buffer(group: &mut ProcessGroup) {
    let params: Vec<Tensor> = (0..2)
        .map(|_| Tensor::zeros([4], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true))
        .collect();
    group.hook_gradients(&params).expect("hooking the gradients");
    group.arm_gradient_hooks().expect("arming the hooks");
    backward(&params, group.rank() as i64 + 1);
    let sum = group.finish_gradient_sum().expect("finishing the gradient sum");
    assert_eq!(sum.buckets, 1, "16 + 16 bytes in a 64-byte bucket");
    let address = |i: usize| params[i].grad().data_ptr() as isize;
    assert_eq!((address(1) - address(0)).abs(), 16);
    assert_gradients(&params, rank_factor_sum(group), "one bucket");
}

/// Rank 1 exits after the group is up; rank 0's next all-reduce must fail (Gloo sees the closed
/// connection; the timeout bounds it otherwise), and so must every later call on the group.
fn dead_peer(group: &mut ProcessGroup) {
    group.barrier().expect("barrier before the fault");
    if group.rank() == 1 {
        std::process::exit(DEAD_EXIT_CODE);
    }
    group.set_timeout(Duration::from_secs(5));
    let err = group
        .all_reduce_sum(&mut [Tensor::ones([4], (Kind::Float, tch::Device::Cpu))])
        .unwrap_err();
    println!("the survivor's error: {err}");
    let DistError::C10d { message, .. } = &err else {
        panic!("not a c10d error: {err}")
    };
    let lower = message.to_lowercase();
    assert!(lower.contains("peer") || lower.contains("timed out"), "{err}");
    let again = group.barrier().unwrap_err();
    assert!(matches!(again, DistError::Failed(_)), "{again}");
}

/// Rank 1 stays alive but never enters the collective; rank 0's all-reduce must give up at its
/// 1 s timeout with c10d's timeout error. Rank 1 leaves only once rank 0's call has returned (a
/// file rank 0 then writes), so that its exit cannot end the wait first.
fn silent_peer(group: &mut ProcessGroup) {
    let port = std::env::var("MASTER_PORT").expect("MASTER_PORT");
    let returned = std::env::temp_dir().join(format!("groundrl-dist-silent-peer-{port}"));
    group.barrier().expect("barrier before the fault");
    if group.rank() == 1 {
        wait_for_file(&returned);
        return;
    }
    group.set_timeout(Duration::from_secs(1));
    let result = group.all_reduce_sum(&mut [Tensor::ones([4], (Kind::Float, tch::Device::Cpu))]);
    std::fs::write(&returned, b"").expect("writing the signal file");
    let err = result.unwrap_err();
    println!("the waiting rank's error: {err}");
    assert!(err.to_string().to_lowercase().contains("timed out"), "{err}");
}

/// Waits until `path` exists (at most a minute), then removes it.
fn wait_for_file(path: &std::path::Path) {
    for _ in 0..1200 {
        if std::fs::remove_file(path).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} never appeared", path.display());
}
