"""Samples, from models and from files: the chat-completions client (:mod:`.llm`), the prompt a
model gets (:mod:`.prompt`), the generation stage of a run (:mod:`.stage`) and sample sets read from
replay folders, JSONL and Parquet (:mod:`.samples`).

May import: spec, results, problem.
"""
