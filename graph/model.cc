// placeholder, replaced by the model
