"""What a `groundrl demo --study` run's two arms learned, by instruction kind: on one held-out set,
for the synthetic tasks' kinds (`task_kind`: a text label, an icon, a position relative to another
element; `element_kind`: button, tab, icon button ...), each arm's accuracy (the supervised baseline:
`eval/before.jsonl`; after GRPO: `eval/after.jsonl`), and how many different places it clicks: the
answers rounded to cells of CELL pixels, their count and the share of the commonest. A model that
grounds the instruction clicks where the named element is; one that learned where elements tend to
be clicks a few fixed places whatever is named.

Usage: python3 scripts/study/by_kind.py DEMO_FOLDER [SET] [CELL]
  SET: `test` (default) or the name of a click set (`unseen-theme`, ...); CELL: default 10.
Reads DEMO_FOLDER/data/<set>/clicks.jsonl (the drawn tasks, with their metadata) and each
DEMO_FOLDER/seed-N/eval[/<set>]/{before,after}.jsonl."""
import collections
import json
import pathlib
import sys

ARMS = (("before", "baseline"), ("after", "GRPO"))


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    out = pathlib.Path(sys.argv[1])
    held_out = sys.argv[2] if len(sys.argv) > 2 else "test"
    cell = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    tasks = {t["id"]: t["metadata"] for t in read_jsonl(out / "data" / held_out / "clicks.jsonl")}
    # Answers with no click point (nothing parsed) are counted apart, not as a place.
    seeds = sorted(out.glob("seed-*/"), key=lambda p: int(p.name.split("-")[1]))
    eval_dir = pathlib.Path("eval") if held_out == "test" else pathlib.Path("eval") / held_out
    answers = {(s.name, label): read_jsonl(s / eval_dir / f"{label}.jsonl") for s in seeds for label, _ in ARMS}
    for key in ("task_kind", "element_kind"):
        print(f"| {key} | tasks | " + " | ".join(
            f"{arm}: accuracy, distinct answers, commonest" for _, arm in ARMS) + " |")
        print("|---|---|" + "---|" * len(ARMS))
        kinds = collections.Counter(m[key] for m in tasks.values())
        for kind, n in kinds.most_common():
            cells = []
            for label, _ in ARMS:
                right, distinct, commonest = [], [], []
                for s in seeds:
                    mine = [r for r in answers[(s.name, label)] if tasks[r["id"]][key] == kind]
                    if not mine:  # every sample of the kind skipped in this seed
                        continue
                    right.append(sum(r["correct"] for r in mine) / len(mine))
                    places = collections.Counter(
                        tuple(round(v / cell) for v in r["point"]) for r in mine if r["point"])
                    distinct.append(len(places))
                    top = places.most_common(1)[0][1] if places else 0
                    commonest.append(top / len(mine))
                cells.append(
                    f"{100 * sum(right) / len(right):.1f}% ({'; '.join(f'{100 * x:.1f}' for x in right)}), "
                    f"{'; '.join(map(str, distinct))}, {'; '.join(f'{100 * x:.0f}%' for x in commonest)}")
            print(f"| {kind} | {n} | " + " | ".join(cells) + " |")
        print()
    print(f"Per seed ({', '.join(s.name for s in seeds)}), separated by `;`; answers rounded to cells of "
          f"{cell:g} pixels (answers without a click point are not a place); the commonest is the share "
          f"of the kind's tasks answered in the most frequent cell.")


if __name__ == "__main__":
    main()
