"""The error hierarchy: messages, hints and exit codes."""

from xmemplan import errors


def test_render_joins_message_and_capitalized_hint():
    e = errors.UsageError("hit rate 1.5 is outside [0, 1]", "write it as a ratio, like 0.98")
    assert e.render() == "hit rate 1.5 is outside [0, 1]. Write it as a ratio, like 0.98."
    assert errors.UsageError("x", "did you mean 'y'?").render() == "x. Did you mean 'y'?"
    assert errors.XmemplanError("plain.").render() == "plain."


def test_input_error_names_file_line_and_field():
    e = errors.InputError("expected an integer", path="t.jsonl", line=7, field="in")
    assert e.render() == "t.jsonl:7, field 'in': expected an integer."
    assert e.exit_code == errors.ExitCode.INPUT == 3


def test_exit_codes_are_distinct():
    codes = [errors.XmemplanError.exit_code, errors.UsageError.exit_code,
             errors.InputError.exit_code, errors.NotAvailableError.exit_code,
             errors.CheckFailedError.exit_code]
    assert codes == [1, 2, 3, 4, 5]
