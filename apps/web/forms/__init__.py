"""Portal forms. They collect input; the rules are the models' `clean()` (shared with the API and the
admin), whose field errors `attach_errors` puts beside the right inputs."""
