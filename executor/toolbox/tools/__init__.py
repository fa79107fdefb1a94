"""The six tools the model is offered, one module each."""
