# Partial credit by sequence similarity (difflib).
import difflib, json, sys

data = json.load(sys.stdin)
r = [difflib.SequenceMatcher(None, c["answer"], c["expected"]).ratio() for c in data["cases"]]
exact = sum(1 for x in r if x == 1.0)
print(json.dumps({"evaluator": "fuzzy_diff", "score": exact / len(r), "mean_ratio": round(sum(r) / len(r), 4)}))
