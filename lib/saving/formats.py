"""The names and versions of the files `tapeflow.saving` writes, and which versions it reads.

Every file says what it is in its root attributes `format` and `version`; a reader is
given the formats it accepts, so that a file of another kind or of a newer version is
refused by name before anything else is read. The layouts are in docs/file-formats.md.

>>> WEIGHTS_FORMAT, WEIGHTS_VERSION, sorted({**NAMED_WEIGHTS_VERSIONS, **STRUCTURED_WEIGHTS_VERSIONS})
('tapeflow-weights', 4, [1, 2, 3, 4])
"""

WEIGHTS_FORMAT = "tapeflow-weights"
CHECKPOINT_FORMAT = "tapeflow-checkpoint"
MODEL_FORMAT = "tapeflow-model"

WEIGHTS_VERSION = 4  # keyed by each weight's place in the model
NAMED_WEIGHTS_VERSION = 3  # keyed by each weight's full name
CHECKPOINT_VERSION = 2
MODEL_VERSION = 2

# {readable version: whether files of that version hold checksums}
STRUCTURED_WEIGHTS_VERSIONS = {2: False, 4: True}
NAMED_WEIGHTS_VERSIONS = {1: False, 3: True}
CHECKPOINT_VERSIONS = {1: False, 2: True}
MODEL_VERSIONS = {1: False, 2: True}
WEIGHTS_VERSIONS = {**NAMED_WEIGHTS_VERSIONS, **STRUCTURED_WEIGHTS_VERSIONS}


def keyed_by_name(fmt: str, version: int) -> bool:
    """Whether the weights of a file of this format and version are keyed by full name
    (checkpoints, and weights files of versions 1 and 3) rather than by structure.

    >>> keyed_by_name(WEIGHTS_FORMAT, 3), keyed_by_name(WEIGHTS_FORMAT, 4), keyed_by_name(MODEL_FORMAT, 2)
    (True, False, False)
    """
    return fmt == CHECKPOINT_FORMAT or (fmt == WEIGHTS_FORMAT and version in NAMED_WEIGHTS_VERSIONS)
