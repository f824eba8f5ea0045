//! Process groups and collectives for groundrl, on libtorch's c10d: the layer under PyTorch's
//! `torch.distributed`, DDP and FSDP, reached through a small C++ shim (`csrc/dist.cpp`).
//!
//! - Rendezvous through c10d's `TCPStore`, served by rank 0 at `MASTER_ADDR:MASTER_PORT`
//!   ([`Rendezvous`], read from torchrun's variables by [`ProcessGroup::from_env`]).
//! - Collectives through c10d's `ProcessGroupGloo` on CPU tensors, or its `ProcessGroupNCCL` on the
//!   CUDA tensors of one device per rank ([`Backend`]; NCCL with the crate's `cuda` feature only): the
//!   sum all-reduce and broadcast (both bucketed, or one tensor), all-gather of tensors and of bytes, barrier.
//! - Gradients summed during the backward pass ([`ProcessGroup::hook_gradients`], module `reducer`):
//!   hooks on the parameters start each bucket's all-reduce as soon as autograd has finished its
//!   gradients, as PyTorch DDP does.
//! - Every call waits at most the group's timeout ([`ProcessGroup::set_timeout`]) and returns an
//!   error with c10d's message past it, or as soon as c10d sees a peer fail (Gloo: a closed
//!   connection). A failed call leaves the ranks out of step, so the group refuses further calls.
//!
//! `docs/distributed.md` says what exists and what has been run where.

mod bucket;
mod ffi;
mod reducer;
mod rendezvous;

use std::ffi::{CString, c_int, c_void};
use std::fmt;
use std::time::Duration;

use tch::{Device, Tensor};

pub use reducer::GradientSum;
pub use rendezvous::Rendezvous;

/// Why a group could not be made or a collective failed.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    #[error(
        "environment variable {name} is not set (a launcher such as torchrun sets RANK, WORLD_SIZE, \
         LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT for each worker)"
    )]
    MissingVar { name: &'static str },
    #[error("environment variable {name}={value:?} is not valid: {why}")]
    BadVar {
        name: &'static str,
        value: String,
        why: String,
    },
    #[error("bad rendezvous: {0}")]
    Rendezvous(String),
    #[error("rank {rank} is not in this group of {world_size}")]
    NoSuchRank { rank: usize, world_size: usize },
    #[error("{operation} failed: {message}")]
    C10d {
        operation: &'static str,
        message: String,
    },
    #[error("the process group failed earlier ({0}) and its ranks are out of step; make a new one")]
    Failed(String),
    /// Something this build lacks: the NCCL backend without the crate's `cuda` feature.
    #[error("{0}")]
    Unsupported(String),
    /// A call out of the gradient hooks' sequence (hook, arm, backward pass, finish), or another
    /// collective while they are armed: refused before any collective, so the group stays usable.
    #[error("{0}")]
    GradientHooks(String),
    /// A tensor away from an NCCL group's device. NCCL reduces its own device's tensors only; the
    /// call is refused before any collective, so the group stays usable.
    #[error("{operation}: a tensor on {found:?}, but this group's collectives run on {expected:?}")]
    WrongDevice {
        operation: &'static str,
        expected: Device,
        found: Device,
    },
}

/// Which c10d backend carries a group's collectives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// `ProcessGroupGloo`: CPU tensors, TCP between ranks.
    #[default]
    Gloo,
    /// `ProcessGroupNCCL`: CUDA tensors on this rank's device ([`ProcessGroup::device`]: CUDA device
    /// `LOCAL_RANK` modulo the devices this process sees), NVLink, PCIe or the network between ranks.
    /// Needs the crate's `cuda` feature.
    Nccl,
}

/// How a group waits and buckets.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// How long the rendezvous and each collective may wait for the other ranks. PyTorch's default
    /// for Gloo groups is 30 minutes (`torch.distributed.constants.default_pg_timeout`).
    pub timeout: Duration,
    /// The size of one `all_reduce_sum` bucket; PyTorch DDP's default `bucket_cap_mb` is 25.
    pub bucket_bytes: usize,
    /// Gloo (the default) or NCCL.
    pub backend: Backend,
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30 * 60),
            bucket_bytes: 25 << 20,
            backend: Backend::Gloo,
        }
    }
}

/// One rank's handle on a group of processes (c10d's Gloo or NCCL backend over a TCPStore).
pub struct ProcessGroup {
    raw: *mut c_void,
    rank: usize,
    world_size: usize,
    device: Device,
    options: GroupOptions,
    failed: Option<String>,
    /// The gradient hooks, once [`Self::hook_gradients`] put them on.
    reducer: Option<reducer::Reducer>,
}

// SAFETY: the c10d backend is not tied to the thread that made it, and every call takes `&mut self`.
unsafe impl Send for ProcessGroup {}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ProcessGroup(rank {} of {}, {:?} on {:?})",
            self.rank, self.world_size, self.options.backend, self.device
        )
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // The hooks go first: they hold the backend.
        self.reducer = None;
        // SAFETY: `raw` came from groundrl_dist_{gloo,nccl}_new and is freed once.
        unsafe { ffi::groundrl_dist_free(self.raw, c_int::from(self.failed.is_some())) }
    }
}

impl ProcessGroup {
    /// Joins the group described by torchrun's variables ([`Rendezvous::from_env`]).
    pub fn from_env(options: GroupOptions) -> Result<Self, DistError> {
        Self::new(&Rendezvous::from_env()?, options)
    }

    /// Joins the group: rank 0 serves the TCPStore, every rank connects to it and to every other
    /// rank, within `options.timeout`.
    ///
    /// Gloo: with a loopback `master_addr` every rank is on this machine and Gloo binds to
    /// 127.0.0.1; otherwise to the address of this host's name (or the interfaces of
    /// `GLOO_SOCKET_IFNAME`), as PyTorch does.
    ///
    /// NCCL: the group is bound to CUDA device `local_rank` modulo the devices this process sees
    /// (all of them: one process per GPU, as torchrun starts them; or one each through
    /// `CUDA_VISIBLE_DEVICES`) and its communicator is made here, so that a rank that never comes
    /// makes this call fail. Unless `TORCH_NCCL_ASYNC_ERROR_HANDLING` is set, it is set to 2, so that
    /// a failed or timed-out collective comes back as an error instead of NCCL's watchdog ending the
    /// process (PyTorch's default, 3). After such an error, drop the group (or exit): c10d's
    /// heartbeat monitor ends the process some minutes after a failure if the group is still there.
    pub fn new(rendezvous: &Rendezvous, options: GroupOptions) -> Result<Self, DistError> {
        rendezvous.check()?;
        let text = |name: &str, value: &str| {
            CString::new(value).map_err(|_| DistError::Rendezvous(format!("{name} holds a NUL byte")))
        };
        let host = text("MASTER_ADDR", &rendezvous.master_addr)?;
        let (rank, world) = (c_int_of(rendezvous.rank)?, c_int_of(rendezvous.world_size)?);
        let timeout = millis(options.timeout);
        let (raw, device) = match options.backend {
            Backend::Gloo => {
                let bind = rendezvous.is_loopback().then_some(c"127.0.0.1");
                // SAFETY: the strings outlive the call; the shim copies what it keeps.
                let raw = unsafe {
                    ffi::groundrl_dist_gloo_new(
                        host.as_ptr(),
                        rendezvous.master_port,
                        rank,
                        world,
                        timeout,
                        bind.map_or(std::ptr::null(), |d| d.as_ptr()),
                    )
                };
                (raw, Device::Cpu)
            }
            Backend::Nccl => nccl_new(&host, rendezvous, rank, world, timeout)?,
        };
        if raw.is_null() {
            return Err(DistError::C10d {
                operation: "joining the process group",
                message: ffi::last_error(),
            });
        }
        Ok(Self {
            raw,
            rank: rendezvous.rank,
            world_size: rendezvous.world_size,
            device,
            options,
            failed: None,
            reducer: None,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The backend that carries this group's collectives.
    pub fn backend(&self) -> Backend {
        self.options.backend
    }

    /// Where this group's tensors live: the CPU for Gloo, this rank's CUDA device for NCCL.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Sets how long each following collective may wait for the other ranks.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.options.timeout = timeout;
    }

    /// Sums each tensor over all ranks, in place: the tensors (on [`Self::device`]; the same shapes,
    /// dtypes and order on every rank) are packed into flat buffers of at most `bucket_bytes` per
    /// dtype, each reduced by one collective and copied back.
    pub fn all_reduce_sum(&mut self, tensors: &mut [Tensor]) -> Result<(), DistError> {
        self.bucketed("all_reduce_sum", tensors, Self::all_reduce_flat)
    }

    /// Replaces each tensor on every rank by rank `root`'s, in the buckets of
    /// [`Self::all_reduce_sum`]: one collective per bucket instead of one per tensor (the same
    /// shapes, dtypes and order on every rank).
    pub fn broadcast_bucketed(&mut self, tensors: &mut [Tensor], root: usize) -> Result<(), DistError> {
        let root = self.check_rank(root)?;
        self.bucketed("broadcast", tensors, |group, flat| {
            group.broadcast_flat(flat, root)
        })
    }

    /// Runs `collective` on each bucket of `tensors` (see [`bucket::plan`]): a lone contiguous
    /// tensor in place, several through one flat copy that is copied back.
    fn bucketed(
        &mut self,
        operation: &'static str,
        tensors: &mut [Tensor],
        mut collective: impl FnMut(&mut Self, &mut Tensor) -> Result<(), DistError>,
    ) -> Result<(), DistError> {
        for tensor in tensors.iter() {
            self.check_device(operation, tensor)?;
        }
        let slots: Vec<bucket::Slot> = tensors.iter().map(bucket::Slot::of).collect();
        for range in bucket::plan(&slots, self.options.bucket_bytes) {
            let bucket = &mut tensors[range];
            if let [tensor] = bucket
                && tensor.is_contiguous()
            {
                collective(self, tensor)?;
                continue;
            }
            let mut flat = tch::no_grad(|| {
                let parts: Vec<Tensor> = bucket.iter().map(|t| t.reshape([-1])).collect();
                Tensor::cat(&parts, 0)
            });
            collective(self, &mut flat)?;
            tch::no_grad(|| {
                let mut offset = 0;
                for tensor in bucket.iter_mut() {
                    let n = tensor.numel() as i64;
                    tensor.copy_(&flat.narrow(0, offset, n).reshape(tensor.size()));
                    offset += n;
                }
            });
        }
        Ok(())
    }

    fn all_reduce_flat(&mut self, tensor: &mut Tensor) -> Result<(), DistError> {
        let raw = tensor.as_mut_ptr() as ffi::RawTensor;
        self.call("all_reduce_sum", |group, ms| {
            // SAFETY: `raw` is a live tensor handle for the duration of the call.
            unsafe { ffi::groundrl_dist_all_reduce_sum(group, raw, ms) }
        })
    }

    /// Replaces `tensor` on every rank by rank `root`'s (the same shape and dtype on every rank).
    pub fn broadcast(&mut self, tensor: &mut Tensor, root: usize) -> Result<(), DistError> {
        let root = self.check_rank(root)?;
        self.check_device("broadcast", tensor)?;
        let mut buffer = tensor.contiguous();
        self.broadcast_flat(&mut buffer, root)?;
        if !tensor.is_contiguous() {
            tch::no_grad(|| tensor.copy_(&buffer));
        }
        Ok(())
    }

    /// Broadcasts a contiguous tensor in place from `root`, a rank already checked.
    fn broadcast_flat(&mut self, tensor: &mut Tensor, root: c_int) -> Result<(), DistError> {
        let raw = tensor.as_mut_ptr() as ffi::RawTensor;
        self.call("broadcast", |group, ms| {
            // SAFETY: `raw` is a live tensor handle for the duration of the call.
            unsafe { ffi::groundrl_dist_broadcast(group, raw, root, ms) }
        })
    }

    /// Every rank's `tensor`, in rank order (the same shape and dtype on every rank).
    pub fn all_gather(&mut self, tensor: &Tensor) -> Result<Vec<Tensor>, DistError> {
        self.check_device("all_gather", tensor)?;
        let input = tensor.contiguous();
        let outputs: Vec<Tensor> = (0..self.world_size).map(|_| input.empty_like()).collect();
        let raws: Vec<ffi::RawTensor> = outputs.iter().map(|t| t.as_ptr() as ffi::RawTensor).collect();
        let world = c_int_of(self.world_size)?;
        self.call("all_gather", |group, ms| {
            // SAFETY: `input` and `outputs` are live tensors for the duration of the call, and
            // `raws` holds `world` handles; the shim writes the outputs' data only.
            unsafe {
                ffi::groundrl_dist_all_gather(
                    group,
                    input.as_ptr() as ffi::RawTensor,
                    raws.as_ptr(),
                    world,
                    ms,
                )
            }
        })?;
        Ok(outputs)
    }

    /// Every rank's bytes, in rank order; lengths may differ between ranks (two collectives: the
    /// lengths, then the bytes padded to the longest).
    pub fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, DistError> {
        let device = self.device;
        let lengths = self.all_gather(&Tensor::from_slice(&[bytes.len() as i64]).to_device(device))?;
        let lengths: Vec<usize> = lengths.iter().map(|t| t.int64_value(&[0]) as usize).collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        if longest == 0 {
            return Ok(vec![Vec::new(); self.world_size]);
        }
        let mut padded = bytes.to_vec();
        padded.resize(longest, 0);
        let gathered = self.all_gather(&Tensor::from_slice(&padded).to_device(device))?;
        Ok(gathered
            .iter()
            .zip(lengths)
            .map(|(t, len)| {
                let mut out = vec![0u8; longest];
                t.to_device(Device::Cpu).copy_data_u8(&mut out, longest);
                out.truncate(len);
                out
            })
            .collect())
    }

    /// Returns once every rank has called it.
    pub fn barrier(&mut self) -> Result<(), DistError> {
        self.call("barrier", |group, ms| {
            // SAFETY: a plain call on the live group.
            unsafe { ffi::groundrl_dist_barrier(group, ms) }
        })
    }

    /// Runs one collective with the group's timeout; a failure marks the group failed.
    fn call(
        &mut self,
        operation: &'static str,
        run: impl FnOnce(*mut c_void, i64) -> c_int,
    ) -> Result<(), DistError> {
        if let Some(earlier) = &self.failed {
            return Err(DistError::Failed(earlier.clone()));
        }
        if self.reducer.as_ref().is_some_and(|r| r.armed) {
            return Err(DistError::GradientHooks(format!(
                "{operation} refused: the gradient hooks are armed, and every rank must issue its \
                 collectives in one order; finish the gradient sum first"
            )));
        }
        if run(self.raw, millis(self.options.timeout)) == 0 {
            return Ok(());
        }
        let message = ffi::last_error();
        self.failed = Some(format!("{operation}: {message}"));
        Err(DistError::C10d { operation, message })
    }

    /// NCCL reduces the tensors of its own device only; Gloo takes what c10d's Gloo takes.
    fn check_device(&self, operation: &'static str, tensor: &Tensor) -> Result<(), DistError> {
        let found = tensor.device();
        if self.options.backend == Backend::Nccl && found != self.device {
            return Err(DistError::WrongDevice {
                operation,
                expected: self.device,
                found,
            });
        }
        Ok(())
    }

    fn check_rank(&self, rank: usize) -> Result<c_int, DistError> {
        if rank >= self.world_size {
            return Err(DistError::NoSuchRank {
                rank,
                world_size: self.world_size,
            });
        }
        c_int_of(rank)
    }
}

/// Makes an NCCL group: the shim's handle (null on failure, the message in `ffi::last_error`) and
/// the CUDA device it is bound to.
#[cfg(feature = "cuda")]
fn nccl_new(
    host: &std::ffi::CStr,
    rendezvous: &Rendezvous,
    rank: c_int,
    world: c_int,
    timeout_ms: i64,
) -> Result<(*mut c_void, Device), DistError> {
    let local_rank = c_int_of(rendezvous.local_rank)?;
    let mut device: c_int = -1;
    // SAFETY: the string outlives the call; the shim copies what it keeps and writes `device`.
    let raw = unsafe {
        ffi::groundrl_dist_nccl_new(
            host.as_ptr(),
            rendezvous.master_port,
            rank,
            world,
            timeout_ms,
            local_rank,
            &mut device,
        )
    };
    Ok((raw, Device::Cuda(usize::try_from(device).unwrap_or(0))))
}

#[cfg(not(feature = "cuda"))]
fn nccl_new(
    _host: &std::ffi::CStr,
    _rendezvous: &Rendezvous,
    _rank: c_int,
    _world: c_int,
    _timeout_ms: i64,
) -> Result<(*mut c_void, Device), DistError> {
    Err(nccl_not_built())
}

#[cfg(not(feature = "cuda"))]
fn nccl_not_built() -> DistError {
    DistError::Unsupported(
        "the NCCL backend is not in this build: groundrl-dist was built without its cuda feature \
         (GPU builds: scripts/gpu/build.sh)"
            .to_owned(),
    )
}

/// The version of the NCCL library that libtorch loaded (for example "2.28.9"): the one beside
/// torch on the GPU machine, which may differ from the 2.28.9 whose header the shim was built with.
pub fn nccl_version() -> Result<String, DistError> {
    #[cfg(feature = "cuda")]
    {
        let mut buffer = [0 as std::ffi::c_char; 64];
        // SAFETY: the shim writes at most `buffer.len()` bytes, NUL included.
        if unsafe { ffi::groundrl_dist_nccl_version(buffer.as_mut_ptr(), buffer.len() as c_int) } != 0 {
            return Err(DistError::C10d {
                operation: "reading NCCL's version",
                message: ffi::last_error(),
            });
        }
        // SAFETY: NUL-terminated by the shim.
        let text = unsafe { std::ffi::CStr::from_ptr(buffer.as_ptr()) };
        Ok(text.to_string_lossy().into_owned())
    }
    #[cfg(not(feature = "cuda"))]
    Err(nccl_not_built())
}

/// A timeout in whole milliseconds for c10d: at least one (c10d reads 0 as "no timeout"), at most
/// `i32::MAX` (24 days), far from where C++'s clock arithmetic would overflow.
fn millis(timeout: Duration) -> i64 {
    let most = i64::from(i32::MAX);
    i64::try_from(timeout.as_millis()).map_or(most, |ms| ms.clamp(1, most))
}

fn c_int_of(n: usize) -> Result<c_int, DistError> {
    c_int::try_from(n).map_err(|_| DistError::Rendezvous(format!("{n} ranks are more than c10d takes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the cuda feature an NCCL group is refused before any rendezvous (nothing listens at
    /// the port), with an error that says how to get one.
    #[cfg(not(feature = "cuda"))]
    #[test]
    fn nccl_without_the_cuda_feature_is_refused_plainly() {
        let rendezvous = Rendezvous {
            master_addr: "127.0.0.1".to_owned(),
            master_port: 1,
            rank: 0,
            world_size: 2,
            local_rank: 0,
            local_world_size: 2,
        };
        let options = GroupOptions {
            backend: Backend::Nccl,
            timeout: Duration::from_millis(1),
            ..GroupOptions::default()
        };
        let err = ProcessGroup::new(&rendezvous, options).unwrap_err();
        assert!(matches!(err, DistError::Unsupported(_)), "{err:?}");
        assert!(err.to_string().contains("cuda feature"), "{err}");
        let err = nccl_version().unwrap_err();
        assert!(err.to_string().contains("cuda feature"), "{err}");
    }

    #[test]
    fn gloo_is_the_default_backend() {
        assert_eq!(GroupOptions::default().backend, Backend::Gloo);
    }
}
