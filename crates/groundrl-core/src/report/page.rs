//! The page: its sections in order, and around them the head, inline stylesheet, contents and notes.

use super::run::Run;
use super::sections::{self, Section, Timeline};
use super::tools;
use crate::plot::escape;

/// The stylesheet, inline so the file needs nothing beside it.
const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:16px 32px}
header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#cbd5e1;font-family:monospace}
nav{padding:8px 32px;background:#e5e7eb;font-size:14px}
nav a{margin-right:16px;color:#1f2937}
main{padding:8px 32px 32px;max-width:1400px}
section{background:#fff;border-radius:6px;padding:8px 20px 16px;margin:16px 0;box-shadow:0 1px 2px rgba(0,0,0,.08)}
h2{font-size:18px;border-bottom:1px solid #e5e7eb;padding-bottom:6px}
table{border-collapse:collapse;margin:8px 0}
th,td{border:1px solid #e5e7eb;padding:4px 10px;text-align:right}
th:first-child,td:first-child{text-align:left}
td.accuracy{font-weight:bold;font-size:18px}
.change{font-size:16px}
.note{color:#a33}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:16px;align-items:start}
.charts>svg{width:100%;height:auto;max-width:640px}
.charts>svg.reliability-diagram{max-width:420px}
.samples{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
figure{margin:0;max-width:380px}
figure.round{max-width:none}
figure img{max-width:100%}
figure.sample{border:2px solid #1a9641;border-radius:4px;padding:6px;background:#fff}
figure.sample.wrong{border-color:#d7191c}
figcaption{font-size:13px;margin-top:4px;overflow-wrap:anywhere}
figcaption code{background:#f3f4f6;white-space:pre-wrap}
pre.config{background:#f3f4f6;padding:12px;overflow:auto;max-height:600px;font-size:13px}
";

/// The report of `run` as one HTML document.
pub fn render(run: &Run) -> String {
    let sections = sections(run);
    let name = run.dir.file_name().map_or_else(
        || run.dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut links: Vec<String> = Vec::new();
    if !run.notes.is_empty() {
        links.push(r##"<a href="#notes">Notes</a>"##.to_string());
    }
    links.extend(
        sections
            .iter()
            .map(|s| format!(r##"<a href="#{}">{}</a>"##, s.id, s.title)),
    );
    let mut main = notes(&run.notes);
    for s in &sections {
        main.push_str(&format!(
            "<section id=\"{}\"><h2>{}</h2>\n{}\n</section>\n",
            s.id, s.title, s.body
        ));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>groundrl report: {title}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n\
         <header><h1>groundrl report: {title}</h1><p>{dir}</p></header>\n<nav>{links}</nav>\n\
         <main>\n{main}</main>\n</body>\n</html>\n",
        title = escape(&name),
        dir = escape(&run.dir.display().to_string()),
        links = links.join(""),
    )
}

/// The sections of the report of `run`, in page order (the tools' only when the model called tools,
/// the curriculum's only when it wrote figures).
fn sections(run: &Run) -> Vec<Section> {
    let timeline = Timeline::new(&run.steps);
    let mut parts = vec![sections::headline(run)];
    parts.extend(sections::alarms(&run.steps));
    parts.extend([
        sections::training(&timeline),
        sections::lengths(&timeline),
        sections::components(&timeline),
        sections::sources(&run.evals),
        sections::calibration(&run.evals),
    ]);
    if tools::used_tools(run) {
        parts.push(tools::section(run, &timeline));
    }
    if !run.rounds.is_empty() {
        parts.push(sections::rounds(run));
    }
    parts.push(sections::samples(run));
    parts.push(sections::config(run));
    parts
}

/// What was missing or skipped, listed first so it is not mistaken for a result.
fn notes(notes: &[String]) -> String {
    if notes.is_empty() {
        return String::new();
    }
    let items: String = notes.iter().map(|n| format!("<li>{}</li>", escape(n))).collect();
    format!("<section id=\"notes\"><h2>Notes</h2><ul class=\"note\">{items}</ul></section>\n")
}
