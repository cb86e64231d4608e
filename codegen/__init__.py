"""torch-rbln's code generator: ops.yaml + templates/ -> generated/ and docs."""
