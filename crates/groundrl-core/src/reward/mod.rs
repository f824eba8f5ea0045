//! Rewards for grounding and detection (semantics.md §4) and the reward spec that combines them.
