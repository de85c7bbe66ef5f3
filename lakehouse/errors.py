"""Every error the factory raises on purpose. The CLI prints these without a traceback."""


class FactoryError(Exception):
    """Base of all factory errors: a message that says what was wrong and what to do."""


class InvalidIdentifierError(FactoryError):
    """A table identifier or ref name is not of the accepted form."""


class TableNotFoundError(FactoryError):
    """The named table does not exist in the catalog."""


class RefNotFoundError(FactoryError):
    """A snapshot id, tag or branch does not exist on the table."""


class EmptyTableError(FactoryError):
    """The table has no snapshot to read yet."""


class UnsupportedSnapshotError(FactoryError):
    """A snapshot holds something the factory cannot read faithfully (e.g. delete files)."""


class CatalogConfigError(FactoryError):
    """The catalog could not be loaded from its configuration."""


class CatalogError(FactoryError):
    """The catalog's database failed while a command used it."""


class InputError(FactoryError):
    """An input path or option given to a job is unusable."""


class CommitError(FactoryError):
    """A commit could not be made after its bounded retries; nothing was committed."""


class ConcurrentCommitError(FactoryError):
    """Another run committed, since this run read a table, something this run's commit would
    contradict (the same documents); nothing of this run was committed."""


class RunConflictError(FactoryError):
    """A run id already committed under other parameters, inputs or counts; nothing more was done."""


class MissingDependencyError(FactoryError):
    """Something the machine must provide (Java, a binary, a package) is missing."""


class ConfigError(FactoryError):
    """A config file or value is missing, unknown or out of range."""


class MixtureSpecError(FactoryError):
    """A mixture spec is malformed or names components, weights or filters that cannot be used."""


class ManifestError(FactoryError):
    """A pinned manifest is unreadable, altered since it was pinned, or of an unknown format."""


class DataFileError(FactoryError):
    """A data file a manifest lists is missing or unreadable (e.g. its snapshot was expired)."""


class TokenizerError(FactoryError):
    """A tokenizer file cannot be loaded or lacks what the loader needs (an end-of-document token)."""


class LoaderConfigError(FactoryError):
    """Loader settings that cannot work together (batch size, world size, shards, sequence length)."""


class LoaderStateError(FactoryError):
    """A loader state that does not belong to this loader's stream or lacks this rank's shards."""


class CheckpointError(FactoryError):
    """A checkpoint holds something that loading it would have to execute, or cannot be read."""


class StreamError(FactoryError):
    """The loader's readers failed (a Ray task or worker kept failing) and the stream cannot go on."""


class FilterConfigError(FactoryError):
    """A quality-filter config file is missing, malformed or has a bad value."""


class ValidationFailedError(FactoryError):
    """The data checks of an audited snapshot failed; main was left unchanged."""


class PublishRefusedError(FactoryError):
    """main moved (or diverged) while a snapshot was audited; main was left unchanged."""


class StorageError(FactoryError):
    """The file system refused an operation: full, read-only, not permitted, or a name too long."""


class JobMemoryError(FactoryError):
    """A job's engine (Spark's JVM) ran out of memory and the job stopped before publishing anything."""
