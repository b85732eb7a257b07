from ropectl.cli.entry import main

if __name__ == "__main__":
    main()
