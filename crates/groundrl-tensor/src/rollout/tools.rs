//! Multi-turn rollouts: the model may call tools (`<tool_call>{"name": ..., "arguments": ...}
//! </tool_call>`) in the middle of its answer, and continues after each reply.
//!
//! Generation runs in rounds, not continuous batching. Round 1 is one [`Generate::generate`] call of
//! every request, with `</tool_call>` added to its stop strings: samples that will call a tool and
//! samples that answer at once share that batch. A completion that stopped at `</tool_call>` holds a
//! call; the toolbox answers it on the sample's original image, and the reply (the end of the
//! assistant's turn, a tool turn with the reply's text and image, the opening of the next assistant
//! turn: [`Processor::tool_turn`]) is appended to the sample's response. Every later round is one
//! call of all the samples that continue, each as its own request: its prompt plus its response so
//! far, with the prompt's images and the tool images. A sample ends when a turn ends otherwise (stop
//! token, another stop string, length), or when a call comes after its last allowed turn or its reply
//! would leave no token of the budget ([`TurnLimits`]).
//!
//! The tool turns are part of the response but not of the policy's output: [`Trajectory::generated`]
//! marks them out of the loss, and [`Trajectory::logprobs`] holds the sampling log-probs of the
//! model's tokens only, each computed by the engine with the whole sequence before it (prompt, earlier
//! turns, tool turns, all images) as context, as the trainer recomputes them.
//!
//! The tools must be declared in the prompt (the chat template's `tools`, from
//! [`Toolbox::schemas`]) for the model to know them; that is the prompt builder's part.

use groundrl_core::rng::keyed;
use groundrl_core::tool::{CallOutcome, Reply, ToolContext, ToolOutput, Toolbox, View};
use groundrl_score::frame::Frame;
use groundrl_score::parse::tool_call_in;
use image::RgbImage;
use tch::Tensor;

use super::{Completion, Engine, FinishReason, GenerationRequest, RolloutError};
use crate::processor::{Encoded, Processor, ProcessorError};

/// The stop string that ends a turn holding a tool call.
pub const TOOL_CALL_END: &str = "</tool_call>";

/// Batched generation of completions, as [`Engine::generate`] does it (completions in request order,
/// then sample order). A trait so that tests can script some completions.
pub trait Generate {
    fn generate(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError>;
}

impl Generate for Engine<'_> {
    fn generate(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError> {
        Engine::generate(self, requests)
    }
}

/// One prompt to sample multi-turn trajectories of.
#[derive(Debug)]
pub struct ToolRequest<'a> {
    /// The prompt, its `n` samples and their sampling settings (each turn's, except as [`ToolRollout`]
    /// says).
    pub request: GenerationRequest,
    /// The prompt's image at full resolution: tools crop from it.
    pub image: &'a RgbImage,
    /// The full view of that image as the prompt shows it (`View::full(frames)`).
    pub view: View,
}

/// How far one sample may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnLimits {
    /// Assistant turns per sample (at least 1): a call in the last one is not run.
    pub max_turns: usize,
    /// Response tokens per sample (at least 1), the model's and the tool turns' together.
    pub max_total_tokens: usize,
}

/// Multi-turn generation with a toolbox; see the module doc.
pub struct ToolRollout<'a> {
    pub engine: &'a dyn Generate,
    /// The processor that encoded the prompts: it encodes the tool turns.
    pub processor: &'a Processor,
    pub toolbox: &'a Toolbox,
    /// The frame the model writes coordinates in (that of the prompt).
    pub model_frame: Frame,
    pub limits: TurnLimits,
}

/// One sample's whole answer: the model's turns and the tool turns between them.
#[derive(Debug)]
pub struct Trajectory {
    /// Position of its request in the call's request list.
    pub prompt_index: usize,
    pub sample_index: u64,
    /// Every token after the prompt, the model's turns and the tool turns between them;
    /// `pixel_values` and `image_grids` are the tool images', in order.
    pub response: Encoded,
    /// Per response token: true where the model generated it (learned from), false for tool-turn
    /// tokens (masked out of the loss).
    pub generated: Vec<bool>,
    /// Per response token: the sampling log-prob (as [`Completion::logprobs`]), 0 at tool tokens.
    pub logprobs: Vec<f32>,
    pub turns: Vec<Turn>,
    /// The view the last image shown is of: the last successful zoom's, else the prompt's full view.
    pub last_view: View,
    /// The last turn's own finish, except [`FinishReason::Length`] when a call's reply did not fit
    /// the token budget. A call after the last allowed turn keeps its turn's
    /// [`FinishReason::StopString`].
    pub finish: FinishReason,
}

/// One assistant turn.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// Its text, decoded with special tokens skipped.
    pub text: String,
    /// How many tokens the model generated in it.
    pub tokens: usize,
    /// The tool call it ended with, if any.
    pub call: Option<CallRecord>,
}

/// A tool call and how it went.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRecord {
    /// The tool's name as the model wrote it (empty when the call was malformed).
    pub name: String,
    /// [`CallOutcome::TurnLimit`] when the call was not answered: it came in the sample's last
    /// allowed turn (not run), or its reply would not have left a token of the budget.
    pub outcome: CallOutcome,
}

impl Trajectory {
    /// The text of the last turn: the final answer (or the call that could not be answered).
    pub fn final_text(&self) -> &str {
        self.turns.last().map_or("", |t| t.text.as_str())
    }

    /// Every call, in order.
    pub fn calls(&self) -> impl Iterator<Item = &CallRecord> {
        self.turns.iter().filter_map(|t| t.call.as_ref())
    }

    fn new(completion: &Completion, view: View) -> Self {
        Self {
            prompt_index: completion.prompt_index,
            sample_index: completion.sample_index,
            response: Encoded {
                input_ids: Vec::new(),
                pixel_values: None,
                image_grids: Vec::new(),
            },
            generated: Vec::new(),
            logprobs: Vec::new(),
            turns: Vec::new(),
            last_view: view,
            finish: completion.finish,
        }
    }

    /// Appends a model turn's tokens and log-probs.
    fn push_generated(&mut self, completion: &Completion) {
        self.response.input_ids.extend(&completion.tokens);
        self.generated
            .extend(std::iter::repeat_n(true, completion.tokens.len()));
        self.logprobs.extend(&completion.logprobs);
        self.finish = completion.finish;
    }

    /// Appends a tool turn (masked out, log-prob 0).
    fn push_tool_turn(&mut self, turn: &Encoded) {
        self.response.append(turn);
        self.generated
            .extend(std::iter::repeat_n(false, turn.input_ids.len()));
        self.logprobs
            .extend(std::iter::repeat_n(0.0, turn.input_ids.len()));
    }
}

/// What the toolbox made of a turn that stopped at `</tool_call>`.
enum Answered {
    /// The reply goes into the conversation and the sample goes on.
    Continue,
    /// The sample ends here.
    End,
}

impl ToolRollout<'_> {
    /// One trajectory per sample, in request order then sample order.
    pub fn generate(&self, requests: &[ToolRequest]) -> Result<Vec<Trajectory>, RolloutError> {
        self.check_limits()?;
        let first: Vec<GenerationRequest> = requests.iter().map(|r| self.first_turn(&r.request)).collect();
        let completions = self.engine.generate(&first)?;
        let mut trajectories = completions
            .iter()
            .map(|c| match requests.get(c.prompt_index) {
                Some(r) => Ok(Trajectory::new(c, r.view)),
                None => Err(unknown_request(c, requests.len())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Each completion of the round with the index of the trajectory it continues.
        let mut round: Vec<(usize, Completion)> = completions.into_iter().enumerate().collect();
        for turn in 2.. {
            let mut next = Vec::new();
            for (index, completion) in round {
                let trajectory = &mut trajectories[index];
                let image = requests[trajectory.prompt_index].image;
                if let Answered::Continue = self.take_turn(trajectory, &completion, image)? {
                    next.push(index);
                }
            }
            if next.is_empty() {
                break;
            }
            let continued: Vec<GenerationRequest> = next
                .iter()
                .map(|&i| {
                    let t = &trajectories[i];
                    self.later_turn(&requests[t.prompt_index].request, t, turn)
                })
                .collect();
            round = continuing(self.engine.generate(&continued)?, &next)?;
        }
        Ok(trajectories)
    }

    fn check_limits(&self) -> Result<(), RolloutError> {
        let l = &self.limits;
        if l.max_turns == 0 || l.max_total_tokens == 0 {
            return Err(RolloutError::Input(format!(
                "turn limits must be at least 1 (max_turns {}, max_total_tokens {})",
                l.max_turns, l.max_total_tokens
            )));
        }
        Ok(())
    }

    /// Round 1 of a request: itself, stopping at `</tool_call>` when tools are offered, with at most
    /// the token budget as `max_new_tokens`.
    fn first_turn(&self, r: &GenerationRequest) -> GenerationRequest {
        let mut params = r.params.clone();
        params.max_new_tokens = params.max_new_tokens.min(self.limits.max_total_tokens);
        if !self.toolbox.is_empty() && !params.stop_strings.iter().any(|s| s == TOOL_CALL_END) {
            params.stop_strings.push(TOOL_CALL_END.into());
        }
        GenerationRequest {
            prompt: r.prompt.share(),
            n: r.n,
            first_sample: r.first_sample,
            params,
            features: r.features.as_ref().map(Tensor::shallow_clone),
        }
    }

    /// Turn `turn` (2 and on) of one sample: the prompt plus the response so far, the same sample
    /// index, a seed of its own per turn (the engine's uniforms are keyed by seed, sample and step,
    /// so the same seed would replay turn 1's draws) and at most the budget left.
    fn later_turn(&self, r: &GenerationRequest, t: &Trajectory, turn: usize) -> GenerationRequest {
        let first = self.first_turn(r);
        let mut prompt = first.prompt;
        prompt.append(&t.response);
        let mut params = first.params;
        params.seed = keyed(params.seed, &format!("tool turn {turn}"));
        let left = self.limits.max_total_tokens - t.response.input_ids.len();
        params.max_new_tokens = params.max_new_tokens.min(left);
        // The tool turns' images follow the prompt's: the tower runs on all of them.
        GenerationRequest {
            prompt,
            n: 1,
            first_sample: t.sample_index,
            params,
            features: None,
        }
    }

    /// Records a model turn and, when it called a tool, answers the call.
    fn take_turn(
        &self,
        trajectory: &mut Trajectory,
        completion: &Completion,
        image: &RgbImage,
    ) -> Result<Answered, RolloutError> {
        let ids: Vec<u32> = completion
            .tokens
            .iter()
            .filter_map(|&t| u32::try_from(t).ok())
            .collect();
        let text = self.processor.tokenizer.decode(&ids, true)?;
        trajectory.push_generated(completion);
        let ended_on_call = !self.toolbox.is_empty()
            && completion.finish == FinishReason::StopString
            && text.contains(TOOL_CALL_END);
        let mut turn = Turn {
            text,
            tokens: completion.tokens.len(),
            call: None,
        };
        let answered = if ended_on_call {
            self.answer(trajectory, &mut turn, image)?
        } else {
            Answered::End
        };
        trajectory.turns.push(turn);
        Ok(answered)
    }

    /// Runs the call `turn` ended with and appends the reply, unless the sample is out of turns or
    /// of tokens. A `</tool_call>` without its opening tag is no call: the turn is the answer.
    fn answer(
        &self,
        trajectory: &mut Trajectory,
        turn: &mut Turn,
        image: &RgbImage,
    ) -> Result<Answered, RolloutError> {
        if trajectory.turns.len() + 1 >= self.limits.max_turns {
            let name = match tool_call_in(&turn.text) {
                None => return Ok(Answered::End),
                Some(call) => call.map(|c| c.name).unwrap_or_default(),
            };
            turn.call = Some(CallRecord {
                name,
                outcome: CallOutcome::TurnLimit,
            });
            return Ok(Answered::End);
        }
        let context = ToolContext {
            image,
            view: &trajectory.last_view,
            model_frame: self.model_frame,
        };
        let Some(reply) = self.toolbox.run(&turn.text, &context) else {
            return Ok(Answered::End);
        };
        let (reply, encoded) = self.encode_reply(reply)?;
        let length = trajectory.response.input_ids.len() + encoded.input_ids.len();
        if length >= self.limits.max_total_tokens {
            turn.call = Some(CallRecord {
                name: reply.name,
                outcome: CallOutcome::TurnLimit,
            });
            trajectory.finish = FinishReason::Length;
            return Ok(Answered::End);
        }
        trajectory.push_tool_turn(&encoded);
        if let Some(view) = reply.output.view {
            trajectory.last_view = view;
        }
        turn.call = Some(CallRecord {
            name: reply.name,
            outcome: reply.outcome,
        });
        Ok(Answered::Continue)
    }

    /// The reply as tokens. An image the processor refuses (a tool's output, so model-driven) turns
    /// the reply into a failure message without it.
    fn encode_reply(&self, reply: Reply) -> Result<(Reply, Encoded), RolloutError> {
        match self.processor.tool_turn(&reply.output) {
            Ok(encoded) => Ok((reply, encoded)),
            Err(ProcessorError::Image(e)) => {
                let failed = Reply {
                    name: reply.name,
                    outcome: CallOutcome::Failed,
                    output: ToolOutput {
                        text: format!("error: the image cannot be shown: {e}"),
                        image: None,
                        view: None,
                    },
                };
                let encoded = self
                    .processor
                    .tool_turn(&failed.output)
                    .map_err(tool_turn_error)?;
                Ok((failed, encoded))
            }
            Err(e) => Err(tool_turn_error(e)),
        }
    }
}

/// A later round's completions (one request per continuing sample) with the index of the trajectory
/// each continues.
fn continuing(
    completions: Vec<Completion>,
    next: &[usize],
) -> Result<Vec<(usize, Completion)>, RolloutError> {
    completions
        .into_iter()
        .map(|c| match next.get(c.prompt_index) {
            Some(&index) => Ok((index, c)),
            None => Err(unknown_request(&c, next.len())),
        })
        .collect()
}

fn unknown_request(c: &Completion, requests: usize) -> RolloutError {
    RolloutError::Input(format!(
        "the generator returned a completion of request {} of {requests}",
        c.prompt_index
    ))
}

fn tool_turn_error(e: ProcessorError) -> RolloutError {
    match e {
        ProcessorError::Tokenizer(e) => RolloutError::Tokenizer(e),
        other => RolloutError::Input(format!("cannot encode a tool turn: {other}")),
    }
}
