//! Where a process stands in a job: its rank and the address of the rendezvous, given explicitly or
//! read from the variables torchrun sets for each worker (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`; PyTorch's torchrun documentation, "Environment
//! Variables"). Other launchers (Slurm scripts, the tests here) set the same six.

use std::net::IpAddr;

use crate::DistError;

/// One process's place in a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendezvous {
    /// Host of the TCPStore, served by rank 0.
    pub master_addr: String,
    pub master_port: u16,
    /// This process's rank among all processes of the job.
    pub rank: usize,
    pub world_size: usize,
    /// This process's rank among the processes of its machine.
    pub local_rank: usize,
    pub local_world_size: usize,
}

impl Rendezvous {
    /// Reads torchrun's six variables from the environment.
    pub fn from_env() -> Result<Self, DistError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads torchrun's six variables through `var` (the environment, or a map in tests), each
    /// checked: a missing or malformed one is named in the error.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, DistError> {
        let text = |name: &'static str| var(name).ok_or(DistError::MissingVar { name });
        let number = |name: &'static str| {
            let value = text(name)?;
            value.trim().parse::<usize>().map_err(|e| DistError::BadVar {
                name,
                value: value.clone(),
                why: e.to_string(),
            })
        };
        let port_text = text("MASTER_PORT")?;
        let master_port = match port_text.trim().parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => {
                return Err(DistError::BadVar {
                    name: "MASTER_PORT",
                    value: port_text,
                    why: "not a TCP port (1 to 65535)".to_owned(),
                });
            }
        };
        let rendezvous = Self {
            master_addr: text("MASTER_ADDR")?,
            master_port,
            rank: number("RANK")?,
            world_size: number("WORLD_SIZE")?,
            local_rank: number("LOCAL_RANK")?,
            local_world_size: number("LOCAL_WORLD_SIZE")?,
        };
        rendezvous.check()?;
        Ok(rendezvous)
    }

    /// Checks that the ranks fit their sizes.
    pub fn check(&self) -> Result<(), DistError> {
        let bad = |why: String| Err(DistError::Rendezvous(why));
        if self.master_addr.trim().is_empty() {
            return bad("MASTER_ADDR is empty".to_owned());
        }
        if self.rank >= self.world_size {
            return bad(format!(
                "RANK {} is not below WORLD_SIZE {}",
                self.rank, self.world_size
            ));
        }
        if self.local_rank >= self.local_world_size {
            return bad(format!(
                "LOCAL_RANK {} is not below LOCAL_WORLD_SIZE {}",
                self.local_rank, self.local_world_size
            ));
        }
        if self.local_world_size > self.world_size {
            return bad(format!(
                "LOCAL_WORLD_SIZE {} is above WORLD_SIZE {}",
                self.local_world_size, self.world_size
            ));
        }
        Ok(())
    }

    /// Whether every rank is on this machine by construction: the store is on a loopback address.
    pub(crate) fn is_loopback(&self) -> bool {
        self.master_addr == "localhost"
            || self
                .master_addr
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn torchrun_vars() -> HashMap<&'static str, String> {
        [
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect()
    }

    fn read(vars: &HashMap<&'static str, String>) -> Result<Rendezvous, DistError> {
        Rendezvous::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn reads_all_six_variables() {
        let r = read(&torchrun_vars()).unwrap();
        assert_eq!(
            r,
            Rendezvous {
                master_addr: "127.0.0.1".to_owned(),
                master_port: 29500,
                rank: 3,
                world_size: 4,
                local_rank: 1,
                local_world_size: 2,
            }
        );
        assert!(r.is_loopback());
    }

    #[test]
    fn a_missing_variable_is_named() {
        for name in [
            "MASTER_ADDR",
            "MASTER_PORT",
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
        ] {
            let mut vars = torchrun_vars();
            vars.remove(name);
            let err = read(&vars).unwrap_err();
            assert!(matches!(err, DistError::MissingVar { name: n } if n == name));
            assert!(err.to_string().contains(name), "{err}");
        }
    }

    #[test]
    fn a_malformed_variable_is_named_with_its_value() {
        for (name, value) in [("RANK", "one"), ("WORLD_SIZE", "-2"), ("MASTER_PORT", "0")] {
            let mut vars = torchrun_vars();
            vars.insert(name, value.to_owned());
            let err = read(&vars).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains(value), "{err}");
        }
    }

    #[test]
    fn ranks_must_fit_their_sizes() {
        for (name, value, expected) in [
            ("RANK", "4", "RANK 4 is not below WORLD_SIZE 4"),
            ("LOCAL_RANK", "2", "LOCAL_RANK 2 is not below LOCAL_WORLD_SIZE 2"),
            (
                "LOCAL_WORLD_SIZE",
                "8",
                "LOCAL_WORLD_SIZE 8 is above WORLD_SIZE 4",
            ),
        ] {
            let mut vars = torchrun_vars();
            vars.insert(name, value.to_owned());
            let err = read(&vars).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn only_loopback_hosts_count_as_one_machine() {
        let mut r = read(&torchrun_vars()).unwrap();
        for (addr, loopback) in [
            ("localhost", true),
            ("::1", true),
            ("10.0.0.2", false),
            ("node-0", false),
        ] {
            r.master_addr = addr.to_owned();
            assert_eq!(r.is_loopback(), loopback, "{addr}");
        }
    }
}
