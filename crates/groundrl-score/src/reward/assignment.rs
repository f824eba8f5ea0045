//! Maximum-weight bipartite matching (the Hungarian method, O(n² m)), for detection rewards that
//! match predictions to ground truth optimally instead of greedily.

/// A dense `rows x cols` matrix of non-negative pair weights, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Weights {
    pub rows: usize,
    pub cols: usize,
    pub values: Vec<f64>,
}

impl Weights {
    fn get(&self, r: usize, c: usize) -> f64 {
        self.values[r * self.cols + c]
    }
}

/// The pairs `(row, col)` of a matching of largest total weight, each row and column used at most
/// once. Pairs of weight 0 mean "not matched" and are left out, so giving ineligible pairs weight 0
/// (and eligible ones a positive weight) yields the best matching over eligible pairs only.
pub fn max_weight_matching(w: &Weights) -> Vec<(usize, usize)> {
    // The method assigns every row of a rows <= cols problem; transpose otherwise.
    let transposed = w.rows > w.cols;
    let (n, m) = if transposed {
        (w.cols, w.rows)
    } else {
        (w.rows, w.cols)
    };
    let cost = |i: usize, j: usize| {
        let (r, c) = if transposed { (j, i) } else { (i, j) };
        -w.get(r, c)
    };
    let row_of_col = min_cost_assignment(n, m, cost);
    let mut pairs: Vec<(usize, usize)> = row_of_col
        .iter()
        .enumerate()
        .filter_map(|(j, i)| i.map(|i| if transposed { (j, i) } else { (i, j) }))
        .filter(|&(r, c)| w.get(r, c) > 0.0)
        .collect();
    pairs.sort_unstable();
    pairs
}

/// Min-cost assignment of `n` rows to distinct columns out of `m >= n`, by shortest augmenting
/// paths with row and column potentials. Returns, for each column, the row assigned to it.
fn min_cost_assignment(n: usize, m: usize, cost: impl Fn(usize, usize) -> f64) -> Vec<Option<usize>> {
    // 1-based indices; column 0 is the virtual start of each augmenting path.
    let mut u = vec![0.0; n + 1];
    let mut v = vec![0.0; m + 1];
    let mut row_at = vec![0usize; m + 1];
    let mut way = vec![0usize; m + 1];
    for i in 1..=n {
        row_at[0] = i;
        let mut j0 = 0;
        let mut min_to = vec![f64::INFINITY; m + 1];
        let mut used = vec![false; m + 1];
        loop {
            used[j0] = true;
            let i0 = row_at[j0];
            let (mut delta, mut j1) = (f64::INFINITY, 0);
            for j in 1..=m {
                if used[j] {
                    continue;
                }
                let reduced = cost(i0 - 1, j - 1) - u[i0] - v[j];
                if reduced < min_to[j] {
                    min_to[j] = reduced;
                    way[j] = j0;
                }
                if min_to[j] < delta {
                    delta = min_to[j];
                    j1 = j;
                }
            }
            for j in 0..=m {
                if used[j] {
                    u[row_at[j]] += delta;
                    v[j] -= delta;
                } else {
                    min_to[j] -= delta;
                }
            }
            j0 = j1;
            if row_at[j0] == 0 {
                break;
            }
        }
        while j0 != 0 {
            let j1 = way[j0];
            row_at[j0] = row_at[j1];
            j0 = j1;
        }
    }
    row_at[1..].iter().map(|&i| (i != 0).then(|| i - 1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn total(w: &Weights, pairs: &[(usize, usize)]) -> f64 {
        pairs.iter().map(|&(r, c)| w.get(r, c)).sum()
    }

    /// Best total over every matching, by trying each column (or none) for each row.
    fn brute_force(w: &Weights, row: usize, used: &mut Vec<bool>) -> f64 {
        if row == w.rows {
            return 0.0;
        }
        let mut best = brute_force(w, row + 1, used);
        for c in 0..w.cols {
            if !used[c] && w.get(row, c) > 0.0 {
                used[c] = true;
                best = best.max(w.get(row, c) + brute_force(w, row + 1, used));
                used[c] = false;
            }
        }
        best
    }

    #[test]
    fn beats_greedy_on_the_classic_case() {
        // greedy takes (0,0)=0.9 and is left with (1,1)=0; best is 0.8 + 0.8
        let w = Weights {
            rows: 2,
            cols: 2,
            values: vec![0.9, 0.8, 0.8, 0.0],
        };
        assert_eq!(max_weight_matching(&w), vec![(0, 1), (1, 0)]);
    }

    #[test]
    fn empty_and_zero_weights() {
        let empty = Weights {
            rows: 0,
            cols: 3,
            values: vec![],
        };
        assert!(max_weight_matching(&empty).is_empty());
        let zeros = Weights {
            rows: 2,
            cols: 1,
            values: vec![0.0, 0.0],
        };
        assert!(max_weight_matching(&zeros).is_empty());
    }

    proptest! {
        #[test]
        fn matches_brute_force(rows in 0usize..6, cols in 0usize..6, seed in proptest::collection::vec(0u8..6, 36)) {
            // weights in {0, 0.2, ..., 1}: many ties and many ineligible pairs
            let values = seed.iter().take(rows * cols).map(|&s| f64::from(s) * 0.2).collect();
            let w = Weights { rows, cols, values };
            let pairs = max_weight_matching(&w);
            let expected = brute_force(&w, 0, &mut vec![false; cols]);
            prop_assert!((total(&w, &pairs) - expected).abs() < 1e-9);
            let mut rs: Vec<_> = pairs.iter().map(|p| p.0).collect();
            let mut cs: Vec<_> = pairs.iter().map(|p| p.1).collect();
            rs.dedup(); cs.sort_unstable(); cs.dedup();
            prop_assert_eq!(rs.len(), pairs.len());
            prop_assert_eq!(cs.len(), pairs.len());
        }
    }
}
