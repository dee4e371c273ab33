"""preflab: preference-data collection and labelling for aligning language models."""

__version__ = "0.1.0"
