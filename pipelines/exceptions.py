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


class InputError(FactoryError):
    """An input path or option given to a job is unusable."""


class CommitError(FactoryError):
    """A commit could not be made after its bounded retries; nothing was committed."""


class MissingDependencyError(FactoryError):
    """Something the machine must provide (Java, a binary, a package) is missing."""


class ConfigError(FactoryError):
    """A config file or value is missing, unknown or out of range."""
