"""Code that runs inside one rank process (never imported by the gang or the pipeline,
except :mod:`pkb_ray.runner.protocol`, the file contract both sides share)."""
