//! Links the `groundrl` binary and tests as groundrl-tensor's targets are linked (see there).

fn main() {
    groundrl_build::reemit_groundrl_tensor_link_args();
}
