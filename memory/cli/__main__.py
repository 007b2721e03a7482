from memory.cli.main import main

main()
