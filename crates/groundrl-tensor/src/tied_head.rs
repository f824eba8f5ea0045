//! The output head as a checkpointed training pass's loss reads it, when the head is the token
//! embedding (tied weights).
//!
//! A tied weight is read twice in a pass: by the embedding lookup at its start and by the output
//! head at its end. Plain autograd adds the two gradients in one backward call and then adds their
//! sum to the weight's gradient once, so over the micro-batches of an accumulation the gradient is
//! `G + (head + lookup)`. A checkpointed backward is several autograd calls: were the loss to read
//! the weight itself, the first call would add the head's part to `G` and the last the lookup's,
//! `(G + head) + lookup`, which rounds otherwise from the second micro-batch on (and reaches the
//! weight in two calls, which a data-parallel reducer has to wait for twice). So the loss reads an
//! alias of the weight (the same storage, a leaf of its own) and the last call back-propagates the
//! alias's gradient into the weight together with the lookup's: `G + (lookup + head)`, the bits of
//! plain autograd.

use tch::{Kind, Tensor};

/// An alias of a tied, trained output head; see the module doc.
#[derive(Debug)]
pub(crate) struct TiedHead {
    weight: Tensor,
    alias: Tensor,
}

impl TiedHead {
    /// The alias of `weight` (the output head) when it is `tied` to the embedding and trained;
    /// `None` otherwise, when the loss can read the weight itself.
    pub fn of(weight: &Tensor, tied: bool) -> Option<Self> {
        (tied && weight.requires_grad()).then(|| Self {
            weight: weight.shallow_clone(),
            alias: weight.detach().set_requires_grad(true),
        })
    }

    /// What the loss reads as the output head.
    pub fn alias(&self) -> &Tensor {
        &self.alias
    }

    /// A scalar whose gradient with respect to the weight is the gradient the loss left on the
    /// alias (its value is not used): to be added to the last backward call's sum. `None` when the
    /// loss did not read the alias.
    pub fn gradient_term(&self) -> Option<Tensor> {
        let grad = self.alias.grad();
        grad.defined().then(|| {
            // d/dW (W . g) = g exactly: the call's incoming gradient is 1.
            self.weight
                .reshape([-1])
                .dot(&grad.reshape([-1]))
                .to_kind(Kind::Float)
        })
    }
}

/// Back-propagates the sum of `terms` (scalars) in one autograd call; nothing when there is none.
pub(crate) fn backward_together(terms: impl IntoIterator<Item = Tensor>) {
    let mut terms = terms.into_iter();
    if let Some(first) = terms.next() {
        terms.fold(first, |sum, term| sum + term).backward();
    }
}
