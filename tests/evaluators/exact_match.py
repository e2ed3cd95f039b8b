# Score answers by normalized exact match (json, re, collections).
import json, re, sys
from collections import Counter

def norm(s):
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", "", s.lower())).strip()

data = json.load(sys.stdin)
hits = Counter(norm(c["answer"]) == norm(c["expected"]) for c in data["cases"])
print(json.dumps({"evaluator": "exact_match", "score": hits[True] / len(data["cases"])}))
