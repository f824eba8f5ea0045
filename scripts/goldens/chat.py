#!/usr/bin/env python3
"""Chat template and tokenizer goldens from HF transformers 5.17, checked by crates/groundrl-tensor/tests/chat.rs.

Loads the committed tiny tokenizer (crates/groundrl-tensor/tests/fixtures/tiny-tokenizer) with AutoTokenizer,
renders conversations with `apply_chat_template` (its own template and small feature templates), expands
`<|image_pad|>` through Qwen2_5_VLProcessor's text path with real dummy images, and encodes tricky strings.
Writes tests/fixtures/chat/{meta,conversations,expansion,encode}.json.

Run: "$(scripts/hf-env.sh)" scripts/goldens/chat.py
"""

import json
from pathlib import Path

import tokenizers
import transformers
from jinja2.exceptions import TemplateError
from PIL import Image
from transformers import AutoTokenizer, Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "crates/groundrl-tensor/tests/fixtures/tiny-tokenizer"
OUT = ROOT / "crates/groundrl-tensor/tests/fixtures/chat"

IMAGE = {"type": "image"}
VIDEO = {"type": "video"}


def text(value):
    return {"type": "text", "text": value}


CLICK = {
    "type": "function",
    "function": {
        "name": "click",
        "description": "Click a point on the screen.",
        "parameters": {
            "type": "object",
            "properties": {
                "x": {"type": "integer", "description": "The x coordinate."},
                "y": {"type": "integer", "description": "The y coordinate."},
            },
            "required": ["x", "y"],
        },
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Température à Paris — «météo» 🌤",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "number", "default": 1.5}},
            "required": ["city"],
        },
    },
}

# Small templates that use what real chat templates use, rendered by HF with the same messages.
FEATURES_TEMPLATE = """{%- set ns = namespace(n=0, last='') %}
{{- bos_token ~ '|' ~ eos_token ~ '|' ~ (unk_token is defined) ~ '|' }}
{%- for message in messages %}
  {%- set ns.n = ns.n + 1 %}
  {%- if message['content'] is string %}
    {%- set body = message['content'].strip() %}
  {%- else %}
    {%- set body = message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join(' ') %}
  {%- endif %}
[{{ loop.index }}/{{ loop.length }} {{ loop.index0 }} first={{ loop.first }} last={{ loop.last }}] {{ message.role | upper }}:
  {%- if body.startswith('Click') %} click!{% endif %}
  {%- if body.endswith('.') %} dot{% endif %}
 {{ body.replace('the', 'THE').split(' ') | length }} words, {{ body | length }} chars: {{ body | trim }}
  {%- if not loop.first %} (after {{ loop.previtem.role }}){% endif %}
  {%- if message.role == 'assistant' %}{% continue %}{% endif %}
  {%- set ns.last = message.role %}
{% endfor %}
count={{ ns.n }} last={{ ns.last }} none={{ none }} true={{ true }} float={{ 2.5 }} {{ 1.0 }} {{ 1e20 }} {{ 0.0001 }}
list={{ [1, 'a', none, true] }} dict={{ {'k': 'v', 'n': 1} }} {{ messages[-1].role }} {{ messages[1:] | length }}
{%- for tool in tools %}
{{ tool | tojson }}
{{ tool.function.parameters | tojson(indent=2) }}
{{ tool.function | tojson(sort_keys=true, separators=(',', ':')) }}
{{ tool.function.description | tojson(ensure_ascii=true) }}
  {%- for key, value in tool.function.parameters.properties.items() %}
{{ key }}={{ value.get('type') }}/{{ value.get('missing', 'dflt') }}
    {%- if loop.index == 1 %}{% break %}{% endif %}
  {%- endfor %}
{%- endfor %}
{%- if add_generation_prompt %}
{{ 'gen' + ':' }} {{ 'a,b,c'.split(',') | reverse | join('-') }} {{ 'MiXeD'.lower() }} {{ 'x' in 'xyz' }}
{%- endif %}
{%- if custom_flag is defined %} flag={{ custom_flag }}{% endif %}
"""

RAISE_TEMPLATE = """{%- for message in messages %}
    {%- if message.role == 'user' and message.content is not string %}
        {{- raise_exception('Only string content is supported, got ' ~ (message.content | length) ~ ' items') }}
    {%- endif %}
    {{- message.content }}
{%- endfor %}"""

TOOL_RESULT = '{"temperature": 21, "unit": "celsius"}'

CONVERSATIONS = [
    {"name": "text_only", "messages": [{"role": "user", "content": "Click the Save button."}], "add_generation_prompt": True},
    {"name": "text_only_no_generation_prompt", "messages": [{"role": "user", "content": "Click the Save button."}]},
    {
        "name": "one_image",
        "messages": [{"role": "user", "content": [IMAGE, text("Find the button.")]}],
        "add_generation_prompt": True,
    },
    {
        "name": "two_images",
        "messages": [{"role": "user", "content": [text("Compare "), IMAGE, text(" and "), IMAGE, text(".")]}],
        "add_generation_prompt": True,
    },
    {
        "name": "two_images_with_vision_ids",
        "messages": [{"role": "user", "content": [IMAGE, IMAGE, text("What changed?")]}],
        "add_generation_prompt": True,
        "kwargs": {"add_vision_id": True},
    },
    {
        "name": "image_forms_and_video",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "a.png"}},
                    {"image": "b.png"},
                    VIDEO,
                    {"video": "c.mp4"},
                    text("Describe."),
                ],
            }
        ],
        "add_generation_prompt": True,
        "kwargs": {"add_vision_id": True},
    },
    {
        "name": "system_given",
        "messages": [
            {"role": "system", "content": "You are a GUI agent. Answer in JSON."},
            {"role": "user", "content": [IMAGE, text("Point to the Submit button.")]},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "multi_turn_with_answers",
        "messages": [
            {"role": "system", "content": [text("You are a helpful assistant.")]},
            {"role": "user", "content": [IMAGE, text("Where is the Print button?")]},
            {"role": "assistant", "content": '{"point": [123, 45], "label": "Print"}'},
            {"role": "user", "content": "And the Cancel button?"},
            {"role": "assistant", "content": [text('<think>\nBottom right.\n</think>\n<answer>[640, 360]</answer>')]},
        ],
    },
    {
        "name": "tools_declared",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [CLICK, WEATHER],
        "add_generation_prompt": True,
    },
    {
        "name": "tool_call_and_responses",
        "messages": [
            {"role": "system", "content": "You operate a computer."},
            {"role": "user", "content": [IMAGE, text("Click OK, then check the weather.")]},
            {
                "role": "assistant",
                "content": "I will click it.",
                "tool_calls": [
                    {"type": "function", "function": {"name": "click", "arguments": {"x": 12, "y": 980}}},
                    {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                ],
            },
            {"role": "tool", "content": '{"status": "ok"}'},
            {"role": "tool", "content": TOOL_RESULT},
            {"role": "assistant", "content": "Done. It is 21 degrees."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [CLICK, WEATHER],
        "add_generation_prompt": True,
    },
    {
        "name": "tool_call_without_content",
        "messages": [
            {"role": "user", "content": "Click at 5, 6."},
            {"role": "assistant", "content": None, "tool_calls": [{"name": "click", "arguments": {"x": 5, "y": 6.5}}]},
            {"role": "tool", "content": [text("clicked")]},
        ],
        "tools": [CLICK],
    },
    {
        "name": "unicode_and_json",
        "messages": [
            {
                "role": "user",
                "content": "Café naïve — 日本語のボタンを押して 🙂👍🏽\n\nLine two\ttab\r\nJSON: "
                '{"bbox_2d": [10, 20, 300, 400], "label": "猫"}  spaces   end ',
            },
            {"role": "assistant", "content": "e\u0301 (decomposed é) and <|im_start|> inside text, <tool_call> too"},
        ],
        "add_generation_prompt": True,
    },
    {
        "name": "features_template",
        "template": FEATURES_TEMPLATE,
        "messages": [
            {"role": "system", "content": "  Be brief.  "},
            {"role": "user", "content": [text("Click the Save button."), IMAGE]},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Click the other one"},
        ],
        "tools": [CLICK, WEATHER],
        "add_generation_prompt": True,
        "kwargs": {"custom_flag": False},
    },
]

CONVERSATIONS.append(
    {
        "name": "numbers_template",
        "template": "{{ values | tojson }}\n{{ values }}\n{% for v in values %}{{ v }} {% endfor %}",
        "messages": [{"role": "user", "content": "numbers"}],
        "kwargs": {"values": [1e-05, 0.0001, 1.2345678901234567e17, -0.0, 0.1, 100.0, 3, -7, 1e16, 12345.678, 2**64 - 1]},
    }
)

ERRORS = [
    {
        "name": "raise_exception",
        "template": RAISE_TEMPLATE,
        "messages": [{"role": "user", "content": [text("hi")]}],
    },
    {
        "name": "unknown_role",
        "messages": [{"role": "narrator", "content": "Once upon a time"}],
    },
    {
        "name": "late_system",
        "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}],
    },
]

# (messages, image sizes as (width, height)) rendered with the tiny template then expanded by the processor.
EXPANSIONS = [
    {"name": "one_image", "messages": CONVERSATIONS[2]["messages"], "images": [(56, 56)]},
    {"name": "two_images", "messages": CONVERSATIONS[3]["messages"], "images": [(112, 84), (140, 56)]},
    {"name": "system_and_image", "messages": CONVERSATIONS[6]["messages"], "images": [(224, 168)]},
]

ENCODE = [
    "",
    " ",
    "   ",
    "Click the Save button",
    " Click the Save button",
    "[123, 45]",
    "(0.25, 0.75) 1920x1080 3.14159",
    "\n",
    "\n\n\n",
    " \n \n",
    "a\r\nb",
    "tab\there",
    "trailing spaces   ",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|im_start|><|im_end|><|endoftext|>",
    "x<|image_pad|><|image_pad|>y",
    "<|vision_start|><|image_pad|><|vision_end|>",
    "<tool_call>\n{}\n</tool_call>",
    "<|im_start|",
    "I'm sure it's THEY'RE, we'll, you'd",
    "Café naïve e\u0301",
    "日本語のテキスト",
    "🙂👍🏽🇫🇷",
    "\u00a0nbsp\u2028line\u0000nul",
    '{"bbox_2d": [10, 20, 300, 400], "label": "cat"}',
]


def main():
    tok = AutoTokenizer.from_pretrained(TINY)
    OUT.mkdir(parents=True, exist_ok=True)
    write("meta.json", meta(tok))
    write("conversations.json", [render(tok, case) for case in CONVERSATIONS])
    write("errors.json", [render_error(tok, case) for case in ERRORS])
    write("expansion.json", [expand(tok, case) for case in EXPANSIONS])
    write("encode.json", [encode(tok, value) for value in ENCODE])


def meta(tok):
    """How transformers loaded the tiny tokenizer: its class, and where its pipeline differs from tokenizer.json."""
    file = json.loads((TINY / "tokenizer.json").read_text())
    backend = json.loads(tok.backend_tokenizer.to_str())
    differences = {key: {"file": file[key], "hf": backend.get(key)} for key in file if key != "model" and file[key] != backend.get(key)}
    model_differences = {
        key: {"file": file["model"][key], "hf": backend["model"].get(key)}
        for key in file["model"]
        if file["model"][key] != backend["model"].get(key)
    }
    return {
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "tokenizer_class": type(tok).__name__,
        "len": len(tok),
        "vocab_size": tok.vocab_size,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "special_tokens_map": tok.special_tokens_map,
        "special_ids": {token: tok.convert_tokens_to_ids(token) for token in SPECIAL_NAMES},
        "pipeline_differences": differences,
        "model_differences": model_differences,
    }


SPECIAL_NAMES = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def template_args(case):
    args = dict(tools=case.get("tools"), add_generation_prompt=case.get("add_generation_prompt", False), **case.get("kwargs", {}))
    if "template" in case:
        args["chat_template"] = case["template"]
    return args


def render(tok, case):
    args = template_args(case)
    rendered = tok.apply_chat_template(case["messages"], tokenize=False, **args)
    ids = tok.apply_chat_template(case["messages"], tokenize=True, **args)["input_ids"]
    text_ids = tok(rendered)["input_ids"]
    assert ids == text_ids, case["name"]
    return {**case, "text": rendered, "ids": ids, "decoded": tok.decode(ids)}


def render_error(tok, case):
    try:
        tok.apply_chat_template(case["messages"], tokenize=False, **template_args(case))
    except TemplateError as error:
        return {**case, "error": str(error)}
    raise AssertionError(f"{case['name']} rendered")


def expand(tok, case):
    """Qwen2_5_VLProcessor's text path: its image processor makes the grids, it replaces each <|image_pad|>."""
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(), tokenizer=tok, video_processor=Qwen2VLVideoProcessor()
    )
    rendered = tok.apply_chat_template(case["messages"], tokenize=False, add_generation_prompt=True)
    images = [Image.new("RGB", size, (200, 30, 30)) for size in case["images"]]
    inputs = processor(text=[rendered], images=images, return_text_replacement_offsets=True)
    merge = processor.image_processor.merge_size ** 2
    counts = [int(grid.prod()) // merge for grid in inputs["image_grid_thw"]]
    ids = inputs["input_ids"][0]
    expanded = processor.get_text_with_replacements([rendered], [processor.image_token * n for n in counts])[0][0]
    assert tok(expanded)["input_ids"] == ids, case["name"]
    return {
        "name": case["name"],
        "messages": case["messages"],
        "text": rendered,
        "image_sizes": case["images"],
        "grid_thw": [list(map(int, grid)) for grid in inputs["image_grid_thw"]],
        "counts": counts,
        "expanded": expanded,
        "ids": ids,
    }


def encode(tok, value):
    ids = tok(value)["input_ids"]
    return {
        "text": value,
        "ids": ids,
        "decoded": tok.decode(ids),
        "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
    }


def write(name, value):
    (OUT / name).write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
