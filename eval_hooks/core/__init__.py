"""Foundation modules every other package may use (they import only the standard library)."""
