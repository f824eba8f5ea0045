//! Where each patch of a vision call sits, worked out on the host: its (row, column) in its image's patch
//! grid, which the 2D rotary embedding turns by, and the four entries of the learned position table that
//! are blended into its position embedding.
//!
//! Patches come image by image and frame by frame in the processor's order: merge blocks row-major, the
//! `merge x merge` patches of a block row-major. The learned table is a `side x side` grid. An image's
//! `h x w` patch grid is laid over it corner to corner (bilinear interpolation with aligned corners):
//! patch row `r` samples table row `r (side - 1) / (h - 1)`, between its floor and the next row, and so
//! for columns. The arithmetic is transformers 5.17's (`get_vision_interpolation_indices_and_weights`),
//! in f32 operation for operation, so the weights are the same bits.

use crate::qwen2_5_vl::rope_index::Grid;

/// (row, column) of every patch of one frame of an `h x w` patch grid, in the processor's order.
fn frame_patches(h: i64, w: i64, merge: i64) -> impl Iterator<Item = [i64; 2]> {
    let blocks = (0..h / merge).flat_map(move |br| (0..w / merge).map(move |bc| (br, bc)));
    blocks.flat_map(move |(br, bc)| {
        (0..merge).flat_map(move |i| (0..merge).map(move |j| [br * merge + i, bc * merge + j]))
    })
}

/// (row, column) of every patch of the grids, in the processor's order, frames repeating their image's.
pub fn patch_positions(grids: &[Grid], merge: i64) -> Vec<[i64; 2]> {
    grids
        .iter()
        .flat_map(|&[t, h, w]| (0..t).flat_map(move |_| frame_patches(h, w, merge)))
        .collect()
}

/// The learned position table's entries blended into each patch's position embedding: four per patch,
/// (floor row, floor column), (floor row, next column), (next row, floor column), (next row, next column).
#[derive(Clone, Debug, PartialEq)]
pub struct PositionTaps {
    /// Row-major indices into the `side x side` table, 4 per patch.
    pub indices: Vec<i64>,
    /// The bilinear weight of each index.
    pub weights: Vec<f32>,
}

/// The taps of every patch of the grids, in the processor's order (see the module docs).
pub fn position_taps(grids: &[Grid], merge: i64, side: i64) -> PositionTaps {
    let mut taps = PositionTaps {
        indices: Vec::new(),
        weights: Vec::new(),
    };
    for &[t, h, w] in grids {
        for _ in 0..t {
            for [row, col] in frame_patches(h, w, merge) {
                let (rows, row_weights) = axis_taps(row, h, side);
                let (cols, col_weights) = axis_taps(col, w, side);
                for (r, rw) in rows.into_iter().zip(row_weights) {
                    for (c, cw) in cols.into_iter().zip(col_weights) {
                        taps.indices.push(r * side + c);
                        taps.weights.push(rw * cw);
                    }
                }
            }
        }
    }
    taps
}

/// The two table lines (floor and next, the next clamped to the table) that position `index` of an axis
/// of `size` patches falls between, and their weights, in transformers' f32 order of operations.
fn axis_taps(index: i64, size: i64, side: i64) -> ([i64; 2], [f32; 2]) {
    let source = (index as f32 * (side - 1) as f32) / (size - 1).max(1) as f32;
    let floor = source.floor();
    let fraction = source - floor;
    let weight = |offset: f32| (1.0 - (fraction - offset).abs()).max(0.0);
    let line = floor as i64;
    (
        [line.min(side - 1), (line + 1).min(side - 1)],
        [weight(0.0), weight(1.0)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_merge_blocks_and_repeat_per_frame() {
        let positions = patch_positions(&[[1, 2, 4], [2, 2, 2]], 2);
        #[rustfmt::skip]
        let expected = [
            [0, 0], [0, 1], [1, 0], [1, 1],   [0, 2], [0, 3], [1, 2], [1, 3],
            [0, 0], [0, 1], [1, 0], [1, 1],   [0, 0], [0, 1], [1, 0], [1, 1],
        ];
        assert_eq!(positions, expected);
    }

    /// A 3-patch axis over a 5-line table lands on lines 0, 2 and 4 exactly; a 4-patch axis on 0, 4/3,
    /// 8/3 and 4: the corners are the table's corners and the weights of a patch sum to 1.
    #[test]
    fn axis_taps_align_corners_and_clamp_at_the_far_edge() {
        assert_eq!(axis_taps(0, 3, 5), ([0, 1], [1.0, 0.0]));
        assert_eq!(axis_taps(1, 3, 5), ([2, 3], [1.0, 0.0]));
        assert_eq!(axis_taps(2, 3, 5), ([4, 4], [1.0, 0.0]));
        let (lines, weights) = axis_taps(1, 4, 5);
        assert_eq!(lines, [1, 2]);
        assert!((weights[0] - 2.0 / 3.0).abs() < 1e-6 && (weights[1] - 1.0 / 3.0).abs() < 1e-6);
        // One patch across: it takes the first line.
        assert_eq!(axis_taps(0, 1, 5), ([0, 1], [1.0, 0.0]));
    }

    #[test]
    fn taps_are_the_outer_product_of_the_axes() {
        let taps = position_taps(&[[1, 2, 2]], 2, 3);
        // Patch (0, 0) sits on entry 0; (0, 1) on column 2; (1, 0) on row 2; (1, 1) on the last entry.
        let on = |i: usize| taps.indices[4 * i];
        assert_eq!([on(0), on(1), on(2), on(3)], [0, 2, 6, 8]);
        for patch in taps.weights.chunks(4) {
            assert_eq!(patch, [1.0, 0.0, 0.0, 0.0]);
        }
        let wide = position_taps(&[[1, 2, 4]], 2, 3);
        let weights: f32 = wide.weights.iter().sum();
        assert!((weights - 8.0).abs() < 1e-6, "{weights}");
    }
}
