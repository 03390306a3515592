"""Trainers' reward hooks onto ``pkb-ray serve``, one small module each: :mod:`.verl` (a custom
reward function), :mod:`.openrlhf` (its remote reward model's request and answer). Each takes a
completion as the trainer has it, finds the code in it (:func:`pkb_ray.generate.llm.extract_code`, as
generation does) and asks the service through :mod:`pkb_ray.serve.client`."""
