//! M-RoPE position ids: three components (temporal, height, width) per token, as transformers 5.17's
//! `get_rope_index` assigns them.
//!
//! Text tokens get the same running index in all three components. An image's merged tokens get
//! (start, start + row, start + col) over the merged grid in raster order, where `start` is the running
//! index before the image; the running index then advances by max(rows, cols), not by the token count,
//! so text after an image continues from max(position) + 1. Padding (attention mask 0) is skipped and
//! gets position 0. `delta = max(position) + 1 - real tokens` is what decoding adds to a plain running
//! index to continue a row (see [`RopeIndex::decode_position`]).
//!
//! This is small integer work done on the host, once per prompt.

use crate::model_error::ModelError;

/// Which kind of token: plain text, an image placeholder or a video placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    Text,
    Image,
    Video,
}

/// A vision input's patch grid (temporal, height, width), before merging.
pub type Grid = [i64; 3];

/// Position ids of a batch: `positions[c][b][i]` for component c in (t, h, w), row b, token i.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RopeIndex {
    pub positions: [Vec<Vec<i64>>; 3],
    /// Per row: max(position) + 1 - number of real (unpadded) tokens.
    pub deltas: Vec<i64>,
}

/// What the rope index needs to know about the model.
#[derive(Clone, Copy, Debug)]
pub struct RopeSpec {
    pub image_token_id: i64,
    pub video_token_id: i64,
    pub spatial_merge_size: i64,
    pub tokens_per_second: i64,
}

impl RopeIndex {
    /// Positions of a left- or right-padded batch. `images` and `videos` are the grids of all rows'
    /// vision inputs in order of appearance; `seconds_per_grid` gives each video's seconds per temporal
    /// patch (1 when absent). Errors when placeholders and grids disagree.
    pub fn new(
        spec: &RopeSpec,
        input_ids: &[Vec<i64>],
        attention_mask: Option<&[Vec<i64>]>,
        images: &[Grid],
        videos: &[Grid],
        seconds_per_grid: &[i64],
    ) -> Result<Self, ModelError> {
        let mut images = images.iter();
        let mut videos = videos
            .iter()
            .zip(seconds_per_grid.iter().copied().chain(std::iter::repeat(1)));
        let mut positions: [Vec<Vec<i64>>; 3] = Default::default();
        let mut deltas = Vec::with_capacity(input_ids.len());
        for (b, row) in input_ids.iter().enumerate() {
            let keep: Vec<bool> = match attention_mask {
                Some(mask) => mask
                    .get(b)
                    .filter(|m| m.len() == row.len())
                    .ok_or_else(|| {
                        ModelError::Input(format!("attention mask row {b} does not match input_ids"))
                    })?
                    .iter()
                    .map(|&m| m != 0)
                    .collect(),
                None => vec![true; row.len()],
            };
            let kinds: Vec<TokenKind> = row
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(&id, _)| spec.kind(id))
                .collect();
            let real = row_positions(spec, &kinds, &mut images, &mut videos)
                .map_err(|e| ModelError::Input(format!("row {b}: {e}")))?;
            let max = real.iter().flat_map(|p| p.iter()).copied().max().unwrap_or(-1);
            deltas.push(max + 1 - real.len() as i64);
            let mut real = real.into_iter();
            for component in positions.iter_mut() {
                component.push(Vec::with_capacity(row.len()));
            }
            for &k in &keep {
                let p = if k {
                    real.next().unwrap_or_default()
                } else {
                    [0; 3]
                };
                for (component, value) in positions.iter_mut().zip(p) {
                    component[b].push(value);
                }
            }
        }
        if images.next().is_some() {
            return Err(ModelError::Input(
                "more image grids than image placeholder runs".into(),
            ));
        }
        if videos.next().is_some() {
            return Err(ModelError::Input(
                "more video grids than video placeholder runs".into(),
            ));
        }
        Ok(Self { positions, deltas })
    }

    /// The position of the token at index `real_index` among a row's real tokens during decoding
    /// (all three components equal).
    pub fn decode_position(&self, row: usize, real_index: i64) -> i64 {
        real_index + self.deltas[row]
    }
}

impl RopeSpec {
    fn kind(&self, id: i64) -> TokenKind {
        if id == self.image_token_id {
            TokenKind::Image
        } else if id == self.video_token_id {
            TokenKind::Video
        } else {
            TokenKind::Text
        }
    }
}

/// Positions of one row's real tokens, consuming one grid per run of image (or video) placeholders.
fn row_positions<'a>(
    spec: &RopeSpec,
    kinds: &[TokenKind],
    images: &mut impl Iterator<Item = &'a Grid>,
    videos: &mut impl Iterator<Item = (&'a Grid, i64)>,
) -> Result<Vec<[i64; 3]>, String> {
    let mut out = Vec::with_capacity(kinds.len());
    let mut next = 0i64;
    let mut i = 0;
    while i < kinds.len() {
        let kind = kinds[i];
        let run = kinds[i..].iter().take_while(|&&k| k == kind).count();
        match kind {
            TokenKind::Text => {
                out.extend((0..run as i64).map(|j| [next + j; 3]));
                next += run as i64;
            }
            TokenKind::Image | TokenKind::Video => {
                let (grid, interval) = match kind {
                    TokenKind::Image => (
                        *images
                            .next()
                            .ok_or("an image placeholder run without an image grid")?,
                        1,
                    ),
                    _ => {
                        let (grid, seconds) = videos
                            .next()
                            .ok_or("a video placeholder run without a video grid")?;
                        (*grid, spec.tokens_per_second * seconds)
                    }
                };
                let block = vision_positions(grid, spec.spatial_merge_size, next, interval);
                if block.len() != run {
                    return Err(format!(
                        "{run} placeholder tokens but grid {grid:?} gives {} merged tokens",
                        block.len()
                    ));
                }
                out.extend(block);
                next += grid[1].max(grid[2]) / spec.spatial_merge_size;
            }
        }
        i += run;
    }
    Ok(out)
}

/// (start + t * interval, start + row, start + col) for every merged token of a grid, in raster order.
fn vision_positions(grid: Grid, merge: i64, start: i64, interval: i64) -> Vec<[i64; 3]> {
    let [t, h, w] = grid;
    let (h, w) = (h / merge, w / merge);
    let mut out = Vec::with_capacity((t * h * w).max(0) as usize);
    for ti in 0..t {
        for hi in 0..h {
            for wi in 0..w {
                out.push([start + ti * interval, start + hi, start + wi]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: RopeSpec = RopeSpec {
        image_token_id: 9,
        video_token_id: 8,
        spatial_merge_size: 2,
        tokens_per_second: 2,
    };

    #[test]
    fn text_then_image_then_text() {
        // 2 text tokens, an image of 4x6 patches = 2x3 merged tokens, then 2 text tokens.
        let ids = vec![vec![1, 2, 9, 9, 9, 9, 9, 9, 3, 4]];
        let r = RopeIndex::new(&SPEC, &ids, None, &[[1, 4, 6]], &[], &[]).unwrap();
        assert_eq!(r.positions[0][0], vec![0, 1, 2, 2, 2, 2, 2, 2, 5, 6]);
        assert_eq!(r.positions[1][0], vec![0, 1, 2, 2, 2, 3, 3, 3, 5, 6]);
        assert_eq!(r.positions[2][0], vec![0, 1, 2, 3, 4, 2, 3, 4, 5, 6]);
        // max 6, 10 tokens: delta -3, so the next token (real index 10) gets position 7.
        assert_eq!(r.deltas, vec![-3]);
        assert_eq!(r.decode_position(0, 10), 7);
    }

    #[test]
    fn left_padding_is_skipped_and_zeroed() {
        let ids = vec![vec![0, 0, 5, 6], vec![5, 6, 7, 4]];
        let mask = vec![vec![0, 0, 1, 1], vec![1, 1, 1, 1]];
        let r = RopeIndex::new(&SPEC, &ids, Some(&mask), &[], &[], &[]).unwrap();
        assert_eq!(r.positions[1][0], vec![0, 0, 0, 1]);
        assert_eq!(r.positions[1][1], vec![0, 1, 2, 3]);
        assert_eq!(r.deltas, vec![0, 0]);
    }

    #[test]
    fn video_time_steps_use_tokens_per_second() {
        let ids = vec![vec![1, 8, 8, 8, 8, 2]];
        // 2 temporal patches of 2x4 patches: 2 x (1x2) merged tokens; 3 seconds per temporal patch.
        let r = RopeIndex::new(&SPEC, &ids, None, &[], &[[2, 2, 4]], &[3]).unwrap();
        assert_eq!(r.positions[0][0], vec![0, 1, 1, 7, 7, 3]);
        assert_eq!(r.positions[2][0], vec![0, 1, 2, 1, 2, 3]);
    }

    #[test]
    fn placeholder_and_grid_mismatches_are_errors() {
        let ids = vec![vec![1, 9, 9, 9, 2]];
        let err = RopeIndex::new(&SPEC, &ids, None, &[[1, 4, 4]], &[], &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("3 placeholder tokens") && err.contains("4 merged"),
            "{err}"
        );
        let err = RopeIndex::new(&SPEC, &ids, None, &[], &[], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("without an image grid"), "{err}");
        let err = RopeIndex::new(&SPEC, &[vec![1, 2]], None, &[[1, 2, 2]], &[], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("more image grids"), "{err}");
    }
}
