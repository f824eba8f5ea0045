//! The prompt texts, as minijinja templates. Each part is one or more full sentences; parts are joined with
//! one space, so no sentence ever runs into the next ("motorcycle.Output", as VLM-R1's OVD write-up found in
//! its prompt).

/// Named templates, registered in the prompt environment.
pub const TEMPLATES: [(&str, &str); 7] = [
    ("task/grounding", "{{ instruction }}"),
    (
        "task/ovd",
        "Please carefully observe the image and detect the following targets: {{ targets }}.",
    ),
    ("format/point", "Answer with the click point (x, y) {{ frame }}."),
    (
        "format/box",
        "Answer with the bounding box [x1, y1, x2, y2] {{ frame }}.",
    ),
    (
        "format/ovd_json",
        "Output each detected target's bbox coordinates {{ frame }} in JSON format. The format of the \
         bbox coordinates is: ```json\n[{\"bbox_2d\": [x1, y1, x2, y2], \"label\": \"target name\"}, \
         {\"bbox_2d\": [x1, y1, x2, y2], \"label\": \"target name\"}]\n```. If there are no such targets \
         in the image, simply respond with None.",
    ),
    // VLM-R1's "standard" think/answer prompt.
    (
        "reasoning/standard",
        "Output the thinking process in <think> </think> and final answer in <answer> </answer> tags.",
    ),
    // VLM-R1's "enhanced" prompt; its OVD write-up saw format reward and accuracy rise together with it.
    (
        "reasoning/enhanced",
        "First think about the reasoning process in the mind and then provide the user with the answer. \
         The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> \
         tags, respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>.",
    ),
];
