"""Errors that become GitHub-shaped error responses."""

from __future__ import annotations


class ApiError(Exception):
    """An error answered as `{"message": ...}` with GitHub's status code."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None,
                 errors: list | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.errors = errors

    def body(self) -> dict:
        data: dict = {"message": self.message,
                      "documentation_url": "https://docs.github.com/rest"}
        if self.errors is not None:
            data["errors"] = self.errors
        return data


class NotFound(ApiError):
    def __init__(self, what: str = "") -> None:
        super().__init__(404, "Not Found")
        self.what = what


class Unprocessable(ApiError):
    """422: the request parsed but a field is wrong (GitHub's "Validation Failed")."""

    def __init__(self, message: str = "Validation Failed", field: str | None = None) -> None:
        errors = [{"resource": "Simulator", "field": field, "code": "invalid"}] if field else None
        super().__init__(422, message, errors=errors)
