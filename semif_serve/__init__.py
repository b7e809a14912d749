"""semif-serve: one model, loaded once, answering typed decisions from option-letter logits."""

__version__ = "0.1.4"
