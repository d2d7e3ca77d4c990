"""What one run is, read once when the engine is built: the option schema
(option, options), the accounting profiles, the model shapes (torch-free), what a
config asks of the pools, and EngineConfig (engine_config), which checks them together.

The package face imports nothing: the algorithms import the option type from here
while the option list imports the algorithms' vocabularies, so an eager face would
close that chain into a circle (algos -> config -> options -> algos)."""
