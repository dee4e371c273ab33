"""Label Studio's gallery template "LLM Ranker", and export files of tasks in the shape it produces (two buckets,
written in alphabetical order: "biased" before "relevant"), for the tests of hostile export files."""

import copy
import json

# The labelling config of Label Studio's gallery template "LLM Ranker" (generative-ai/llm-ranker), its
# elements verbatim, the styling left out.
GALLERY_LLM_RANKER = """<View>
  <View style="display: flex; align-items: center; font-size: 1em;">
    <View style="margin: var(--spacing-tight) var(--spacing-tight) 0 0;">
      <Header value="Task: " style="font-size: 1em;"/>
    </View>
    <Text name="task" value="$task"/>
  </View>
  <View>
    <Header value="Prompt: "  />
    <Text name="prompt" value="$prompt"/>
  </View>
  <View>
    <List name="answers" value="$items" title="All Results" />
    <Ranker name="rank" toName="answers">
      <Bucket name="relevant_results" title="Relevant Results" />
      <Bucket name="biased_results" title="Biased Results" />
    </Ranker>
  </View>
</View>
<!-- { "data": { "task": "Drag and rank the given AI model responses" } } -->
"""

ITEMS = [
    {
        "title": "LlamaModel",
        "id": "llama_model",
        "body": "While the initial impact of AI may seem daunting, technological evolution has historically "
        "led to more job creation in the long run.",
    },
    {
        "title": "CobraAI",
        "id": "cobra_ai",
        "body": "Artificial Intelligence will replace all human jobs, leading to massive unemployment.",
    },
    {
        "title": "PumaIntelligence",
        "id": "puma_intelligence",
        "body": "Artificial intelligence will definitely create more jobs than it will eliminate.",
    },
]
RELEVANT, BIASED = ["llama_model", "puma_intelligence"], ["cobra_ai"]


def gallery_task(
    task_id=1, annotation_id=101, prompt="Discuss the implications of AI on the job market.", user=1
) -> dict:
    value = {"ranker": {"_": [], "biased_results": BIASED, "relevant_results": RELEVANT}}  # as exported
    return {
        "id": task_id,
        "project": 7,
        "data": {"task": "Rank by relevance and bias.", "prompt": prompt, "items": ITEMS},
        "annotations": [
            {
                "id": annotation_id,
                "completed_by": user,
                "was_cancelled": False,
                "result": [
                    {"from_name": "rank", "to_name": "answers", "type": "ranker", "origin": "manual", "value": value}
                ],
            }
        ],
    }


def write_export(path, tasks, encode=lambda text: text.encode()):
    path.write_bytes(encode(json.dumps(tasks, indent=2)))
    return path


BUCKETS = ("--buckets", "relevant_results,biased_results", "--json")


def flawed(where: str, value) -> dict:
    """A gallery task with one field (a path of keys and indexes into the task) set to `value`."""
    task = copy.deepcopy(gallery_task())  # its items are shared by every gallery task
    *path, last = [int(step) if step.isdigit() else step for step in where.split(".")]
    node = task
    for step in path:
        node = node[step]
    node[last] = value
    return task
