"""Built-in channel plugins: each registers through the ``cloudybot`` entry-point group."""
