"""The passkey wording of the YaRN and LongLoRA passkey tests (after Mohtashami & Jaggi, 2023), word for word: the one
home of the text that both ``eval-passkey`` (tasks/passkey/) and the RULER-style passkey task (tasks/ruler/) build
their prompts from."""

TASK = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
        "I will quiz you about the important information there.")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is"
