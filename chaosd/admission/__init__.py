"""Admission control: the collapse and failure detector, and the throttle that sheds load on its judgement.

May import the packages below it: views, core, events, config, faults, pipeline, backends, telemetry."""
