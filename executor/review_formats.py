"""The old name of `executor.review.formats`, kept so that library code written against it
(`from executor.review_formats import to_sarif`) still imports."""

from executor.review.formats import (
    escape_data,
    escape_property,
    github_annotations,
    to_code_quality,
    to_json,
    to_markdown,
    to_sarif,
    to_sarif_log,
)

__all__ = [
    "escape_data", "escape_property", "github_annotations", "to_code_quality", "to_json",
    "to_markdown", "to_sarif", "to_sarif_log",
]
