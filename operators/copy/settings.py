"""The copy operator's parameters (:class:`CopySettings`), checked when they are made. IBM's
camelCase names are accepted as aliases."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from operators.copy.transfer import DEFAULT_CHUNK

__all__ = ["CopyDirection", "CopySettings"]

CopyDirection = Literal["copyFromLocalFile", "copyToLocalFile"]


def _alias(snake: str, camel: str) -> AliasChoices:
    return AliasChoices(snake, camel)


class CopySettings(BaseModel):
    """Parameters of :class:`HDFS2FileCopy` (IBM's camelCase names are accepted as aliases).

    Each side is named either by a fixed path (``local_file``, ``hdfs_file``) or by the
    attribute of the input record that holds it (``local_file_attr_name``,
    ``hdfs_file_attr_name``). A path ending in ``/`` (or naming an existing directory) on the
    destination side receives the source's file name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: The local file (relative: to the working directory).
    local_file: str | None = Field(None, validation_alias=_alias("local_file", "localFile"))
    #: The file on the filesystem (a path on it, or a URI naming its own filesystem).
    hdfs_file: str | None = Field(None, validation_alias=_alias("hdfs_file", "hdfsFile"))
    local_file_attr_name: str | None = Field(
        None, validation_alias=_alias("local_file_attr_name", "localFileAttrName")
    )
    hdfs_file_attr_name: str | None = Field(
        None, validation_alias=_alias("hdfs_file_attr_name", "hdfsFileAttrName")
    )
    #: ``copyFromLocalFile`` (local -> filesystem) or ``copyToLocalFile``.
    direction: CopyDirection
    #: Delete the source once the destination is durable.
    delete_source_file: bool = Field(
        False, validation_alias=_alias("delete_source_file", "deleteSourceFile")
    )
    #: Replace a destination holding other content (atomically); otherwise it is an error.
    overwrite_destination_file: bool = Field(
        False, validation_alias=_alias("overwrite_destination_file", "overwriteDestinationFile")
    )
    #: What a failed copy does: ``fail`` raises it; ``emit`` returns IBM's result
    #: ``"ERROR :<message>"`` (logged at ERROR) and goes on with the next record.
    on_error: Literal["fail", "emit"] = Field(
        "fail", validation_alias=_alias("on_error", "onError")
    )
    #: Bytes per read and write request.
    chunk_size: int = Field(DEFAULT_CHUNK, ge=1, validation_alias=_alias("chunk_size", "chunkSize"))

    @model_validator(mode="after")
    def _one_name_per_side(self) -> CopySettings:
        for fixed, attr in (
            ("local_file", "local_file_attr_name"),
            ("hdfs_file", "hdfs_file_attr_name"),
        ):
            fixed_value, attr_value = getattr(self, fixed), getattr(self, attr)
            if fixed_value is not None and attr_value is not None:
                msg = f"{fixed}={fixed_value!r} and {attr}={attr_value!r} exclude each other"
                raise ValueError(msg)
            if fixed_value is None and attr_value is None:
                raise ValueError(f"one of {fixed} or {attr} is required")
            if fixed_value is not None and not fixed_value.strip():
                raise ValueError(f"{fixed}={fixed_value!r} is empty")
            if attr_value is not None and not attr_value.strip():
                raise ValueError(f"{attr}={attr_value!r} is empty")
        return self

    @property
    def per_record(self) -> bool:
        """Whether a path comes from the input records (an attribute form is set)."""
        return self.local_file_attr_name is not None or self.hdfs_file_attr_name is not None
