//! Links the `groundrl` binary and tests as groundrl-tensor's targets are linked (see there).

include!("../groundrl-tensor/dependent_build.rs");

fn main() {
    reemit_groundrl_tensor_link_args();
}
