"""Portal forms. They collect input; the rules are the models' `clean()` (shared with the API and the
admin), whose field errors `attach_errors` puts beside the right inputs."""


class PlainLabels:
    """Labels without Django's trailing colon (screen readers read the label as written)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
