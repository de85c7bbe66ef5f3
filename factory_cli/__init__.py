"""The top floor: the ``factory`` command, each command's arguments and output, and the demo.

Named ``factory_cli`` because the import name ``factory`` belongs to a popular package
(factory_boy). Nothing below imports it (docs/architecture.md, "Floors")."""
