//! The questions asked about one screenshot. Every click instruction names exactly one element:
//! texts and icons are unique per screenshot (see `vocab` and `layout`), and a relative instruction
//! names the single nearest element in one direction of a uniquely named anchor.

use crate::raster::draw::Rect;
use crate::rng::SplitMix64;

use super::variety::Wording;
use super::widgets::{Element, Kind};

/// How a task names its target; stored in sample metadata as `task_kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// "Click the \"Save\" button."
    Text,
    /// "Click the red circle icon."
    Icon,
    /// "Click the button right of the \"Save\" button."
    Relative,
    /// "Find all checkboxes."
    Detection,
}

impl TaskKind {
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Text => "text",
            TaskKind::Icon => "icon",
            TaskKind::Relative => "relative",
            TaskKind::Detection => "detection",
        }
    }
}

/// One question: an instruction and the indices of its target elements.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthTask {
    pub kind: TaskKind,
    pub instruction: String,
    pub targets: Vec<usize>,
}

/// The four directions of relative instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Left,
    Right,
    Above,
    Below,
}

impl Direction {
    const ALL: [Direction; 4] = [
        Direction::Left,
        Direction::Right,
        Direction::Above,
        Direction::Below,
    ];

    fn phrase(self) -> &'static str {
        match self {
            Direction::Left => "left of",
            Direction::Right => "right of",
            Direction::Above => "above",
            Direction::Below => "below",
        }
    }
}

/// Up to `count` tasks: one detection task, then click tasks taking turns between text, icon and
/// relative ones, each on a different target element; worded as `wording` says (which draws nothing,
/// so the tasks and targets are the same in every wording).
pub fn make_tasks(
    elements: &[Element],
    rng: &mut SplitMix64,
    count: usize,
    wording: Wording,
) -> Vec<SynthTask> {
    let mut pools = [
        text_tasks(elements, wording),
        icon_tasks(elements, wording),
        relative_tasks(elements, wording),
    ];
    for pool in &mut pools {
        rng.shuffle(pool);
    }
    let mut detection = detection_tasks(elements, wording);
    rng.shuffle(&mut detection);
    let mut tasks: Vec<SynthTask> = detection.into_iter().take(1.min(count)).collect();
    let mut used_targets: Vec<usize> = Vec::new();
    while tasks.len() < count && pools.iter().any(|p| !p.is_empty()) {
        for pool in &mut pools {
            if tasks.len() == count {
                break;
            }
            while let Some(task) = pool.pop() {
                if !used_targets.contains(&task.targets[0]) {
                    used_targets.push(task.targets[0]);
                    tasks.push(task);
                    break;
                }
            }
        }
    }
    tasks
}

/// How an instruction refers to an element by what it shows: `the "Save" button`, `the red circle icon`.
pub fn describe(el: &Element) -> Option<String> {
    match (el.kind, &el.text, el.icon) {
        (Kind::Checkbox, Some(text), _) => Some(format!("the checkbox labelled \"{text}\"")),
        (_, Some(text), _) => Some(format!("the \"{text}\" {}", el.kind.noun())),
        (_, None, Some(icon)) => Some(format!("the {} icon", icon.description())),
        _ => None,
    }
}

fn is_target(el: &Element) -> bool {
    el.kind != Kind::Label
}

fn click(kind: TaskKind, what: String, target: usize, wording: Wording) -> SynthTask {
    SynthTask {
        kind,
        instruction: wording.click(&what, target),
        targets: vec![target],
    }
}

fn text_tasks(elements: &[Element], wording: Wording) -> Vec<SynthTask> {
    let named = elements
        .iter()
        .enumerate()
        .filter(|(_, el)| is_target(el) && el.text.is_some());
    named
        .filter_map(|(i, el)| Some(click(TaskKind::Text, describe(el)?, i, wording)))
        .collect()
}

fn icon_tasks(elements: &[Element], wording: Wording) -> Vec<SynthTask> {
    let icons = elements.iter().enumerate().filter(|(_, el)| el.icon.is_some());
    icons
        .filter_map(|(i, el)| Some(click(TaskKind::Icon, describe(el)?, i, wording)))
        .collect()
}

fn relative_tasks(elements: &[Element], wording: Wording) -> Vec<SynthTask> {
    let mut tasks = Vec::new();
    for (a, anchor) in elements.iter().enumerate() {
        let Some(anchor_words) = describe(anchor) else {
            continue;
        };
        for dir in Direction::ALL {
            let Some(n) = neighbour(elements, a, dir) else {
                continue;
            };
            if !is_target(&elements[n]) {
                continue;
            }
            let noun = elements[n].kind.noun();
            let what = format!("the {noun} {} {anchor_words}", dir.phrase());
            tasks.push(click(TaskKind::Relative, what, n, wording));
        }
    }
    tasks
}

fn detection_tasks(elements: &[Element], wording: Wording) -> Vec<SynthTask> {
    let kinds = [
        Kind::Button,
        Kind::IconButton,
        Kind::Tab,
        Kind::MenuItem,
        Kind::ListItem,
        Kind::TextField,
        Kind::Checkbox,
    ];
    kinds
        .into_iter()
        .enumerate()
        .filter_map(|(nth, kind)| {
            let targets: Vec<usize> = (0..elements.len())
                .filter(|&i| elements[i].kind == kind)
                .collect();
            (!targets.is_empty()).then(|| SynthTask {
                kind: TaskKind::Detection,
                instruction: wording.find(kind.plural(), nth),
                targets,
            })
        })
        .collect()
}

/// The nearest element in direction `dir` of element `a`, within twice the taller height. Every
/// element overlapping `a` sideways competes; the answer is `None` unless the nearest one is alone at
/// its distance and shares at least half of the smaller extent, so the instruction is never ambiguous.
fn neighbour(elements: &[Element], a: usize, dir: Direction) -> Option<usize> {
    let anchor = elements[a].rect;
    let mut near: Vec<(u32, bool, usize)> = elements
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != a)
        .filter_map(|(i, el)| {
            let (gap, mostly_shared) = gap_in_direction(anchor, el.rect, dir)?;
            (gap <= 2 * anchor.h.max(el.rect.h)).then_some((gap, mostly_shared, i))
        })
        .collect();
    near.sort_unstable();
    match near.as_slice() {
        [(gap, true, i), rest @ ..] if rest.first().is_none_or(|(next, _, _)| next > gap) => Some(*i),
        _ => None,
    }
}

/// The distance from `from` to `to` when `to` lies in direction `dir` and overlaps it sideways, and
/// whether the overlap is at least half of the smaller extent.
fn gap_in_direction(from: Rect, to: Rect, dir: Direction) -> Option<(u32, bool)> {
    let overlap = |a1: u32, a2: u32, b1: u32, b2: u32| a2.min(b2).saturating_sub(a1.max(b1));
    let rows = || overlap(from.y, from.bottom(), to.y, to.bottom());
    let columns = || overlap(from.x, from.right(), to.x, to.right());
    let (gap, shared, smaller) = match dir {
        Direction::Right => (to.x.checked_sub(from.right())?, rows(), from.h.min(to.h)),
        Direction::Left => (from.x.checked_sub(to.right())?, rows(), from.h.min(to.h)),
        Direction::Below => (to.y.checked_sub(from.bottom())?, columns(), from.w.min(to.w)),
        Direction::Above => (from.y.checked_sub(to.bottom())?, columns(), from.w.min(to.w)),
    };
    (shared > 0).then_some((gap, 2 * shared >= smaller))
}
